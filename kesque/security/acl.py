"""Kafka's ACL types: the codes of resource types, operations, permission types and pattern
types; ACL bindings and the filters DescribeAcls and DeleteAcls carry, matching as Kafka's
(``ResourcePatternFilter``, ``AccessControlEntryFilter``, ``AclBindingFilter``); and the checks
an ACL creation and a deletion filter get before anything is stored (Kafka's ``AclApis`` on the
broker, then the controller's ``AclControlManager``), with their INVALID_REQUEST messages."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ..errors import ErrorCode, KafkaError

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "creation_error",
    "deletion_filter_error",
    "has_unknown_code",
    "parse_enum",
    "pascal_name",
]

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as Kafka's Resource.CLUSTER_NAME
WILDCARD_RESOURCE = "*"  # a LITERAL ACL on "*" applies to every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class _Coded(IntEnum):
    @classmethod
    def from_code(cls, code: int):
        """Kafka's fromCode: a code this version does not know is UNKNOWN."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @property
    def is_unknown(self) -> bool:
        return self.value == 0


class AclOperation(_Coded):
    """Kafka's AclOperation codes (as DescribeAcls and the authorized-operations bit sets carry them)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(_Coded):
    """Kafka's ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(_Coded):
    """Kafka's PatternType: ANY and MATCH only in filters, LITERAL and PREFIXED in ACLs."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


def pascal_name(value: IntEnum) -> str:
    """Kafka's SecurityUtils name of an enum value: ``TransactionalId``, ``DescribeConfigs``."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_enum(cls: type[_Coded], text: str):
    """Kafka's SecurityUtils lookups: the Pascal-case name or its upper-case form (``Topic``,
    ``TOPIC``, ``IdempotentWrite``, ``IDEMPOTENTWRITE``), else the enum's ``fromString``
    (the constant's name, case-insensitive: ``idempotent_write``)."""
    for value in cls:
        pascal = pascal_name(value)
        if text in (pascal, pascal.upper()):
            return value
    try:
        return cls[text.upper()]
    except KeyError:
        raise ValueError(f"Unknown {cls.__name__} name: {text}") from None


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice"
    host: str  # "*" or an address
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Matches resource patterns: ANY type, a None name and ANY pattern type match all; MATCH
    matches the patterns that would apply to the named resource (the literal name, the
    wildcard, and every prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if pt == PatternType.ANY or pt == pattern.pattern_type:
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {pattern.pattern_type.name}")

    def find_indefinite_field(self) -> str | None:
        if self.resource_type == ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type == PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation == AclOperation.ANY:
            return "Operation is ANY"
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type == AclPermissionType.ANY:
            return "Permission type is ANY"
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = ResourcePatternFilter()
    entry_filter: AccessControlEntryFilter = AccessControlEntryFilter()

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    def find_indefinite_field(self) -> str | None:
        return self.pattern_filter.find_indefinite_field() or self.entry_filter.find_indefinite_field()

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None


AclBindingFilter.ANY = AclBindingFilter()


def has_unknown_code(resource_type: int, pattern_type: int, operation: int, permission_type: int) -> bool:
    """Does a CreateAcls creation, a DescribeAcls request or a DeleteAcls filter carry a code 0
    (UNKNOWN)? Kafka's request classes refuse to parse such a request (``... contain unknown
    elements``), and a request that does not parse closes the connection. Codes Kafka does not
    know at all parse (as UNKNOWN) and meet :func:`creation_error` or
    :func:`deletion_filter_error` instead."""
    return 0 in (resource_type, pattern_type, operation, permission_type)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def creation_error(binding: AclBinding) -> KafkaError | None:
    """Why an ACL may not be created, as the broker's AclApis and then the controller's
    AclControlManager.validateNewAcl answer (INVALID_REQUEST with Kafka's message), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        return _invalid("Invalid empty resource name")
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return _invalid(f"Invalid resourceType {pattern.resource_type.name}")
    if not pattern.pattern_type.is_specific:
        return _invalid(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return _invalid(f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return _invalid(f"Invalid permissionType {entry.permission_type.name}")
    return None


def deletion_filter_error(filt: AclBindingFilter) -> KafkaError | None:
    """AclControlManager.validateFilter: a DeleteAcls filter with an unknown part is refused."""
    if filt.pattern_filter.is_unknown:
        return _invalid("Unknown patternFilter.")
    if filt.entry_filter.is_unknown:
        return _invalid("Unknown entryFilter.")
    return None
