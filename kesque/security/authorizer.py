"""Kafka's StandardAuthorizer, sans-IO: the ACLs the metadata log holds (added and removed by
id, as AccessControlEntryRecord and RemoveAccessControlEntryRecord replay), ``super.users`` and
``allow.everyone.if.no.acl.found``, and the decision for one action.

The rules, as Kafka's StandardAuthorizerData:
- a super user may do anything;
- the ACLs that apply to a resource are the LITERAL ones on its name, the LITERAL ones on the
  wildcard ``*``, and the PREFIXED ones on any prefix of its name, for the request's principal
  or ``User:*``, from its host or ``*``;
- one applicable DENY refuses; otherwise one applicable ALLOW allows; an ALLOW for READ, WRITE,
  DELETE or ALTER also allows DESCRIBE, one for ALTER_CONFIGS also DESCRIBE_CONFIGS, one for ALL
  everything (a DENY denies only its own operation, or everything when it is ALL);
- with no ACL at all on the resource (for anyone), ``allow.everyone.if.no.acl.found`` decides
  (false by default); with ACLs on it that do not allow this, the answer is no.

The index is Kafka's: per resource type, the resource names that carry ACLs in one sorted list.
A check finds its name by bisection and walks down to the shorter names that are prefixes of it,
jumping over the rest by bisection again, so it costs O(log n) in the number of ACLs, not a scan.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cmp_to_key

from ..errors import ErrorCode, KafkaError
from .acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from .principal import KafkaPrincipal, parse_principal

__all__ = [
    "ALLOW_EVERYONE_IF_NO_ACL_IS_FOUND_CONFIG",
    "SUPER_USERS_CONFIG",
    "AuthorizerNotReady",
    "StandardAcl",
    "StandardAuthorizer",
]

SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_IS_FOUND_CONFIG = "allow.everyone.if.no.acl.found"

_IMPLIES_DESCRIBE = frozenset(
    (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS))
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_LITERAL, _PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


class AuthorizerNotReady(KafkaError):
    """Kafka's AuthorizerNotReadyException: the ACLs are not loaded yet (a super user is still
    allowed). Kafka has no error code for it: the client sees UNKNOWN_SERVER_ERROR."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.unknown_server_error, "The authorizer is not ready")


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL as the metadata log holds it (AccessControlEntryRecord, less its id)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_binding(cls, b: AclBinding) -> StandardAcl:
        p, e = b.pattern, b.entry
        return cls(p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission_type)

    def to_binding(self) -> AclBinding:
        return AclBinding(
            ResourcePattern(self.resource_type, self.resource_name, self.pattern_type),
            AccessControlEntry(self.principal, self.host, self.operation, self.permission_type),
        )


def _compare(a: StandardAcl, b: StandardAcl) -> int:
    """StandardAcl.compareTo: resource type, then the resource name REVERSED, then pattern type,
    operation, principal, host, permission type (DescribeAcls lists ACLs in this order)."""
    for x, y in (
        (a.resource_type, b.resource_type),
        (b.resource_name, a.resource_name),
        (a.pattern_type, b.pattern_type),
        (a.operation, b.operation),
        (a.principal, b.principal),
        (a.host, b.host),
        (a.permission_type, b.permission_type),
    ):
        if x != y:
            return -1 if x < y else 1
    return 0


_ORDER = cmp_to_key(_compare)


class _Section:
    """The ACLs of one resource type: LITERAL ones by name, PREFIXED ones by name, and the
    PREFIXED names sorted (the index a check walks). The groups found for a name are kept
    (up to ``CACHED`` names, all dropped when an ACL of this type changes), so a request
    path asking about the same topics again pays a dict lookup."""

    __slots__ = ("literal", "prefixed", "prefixes", "found")

    CACHED = 4096

    def __init__(self) -> None:
        self.literal: dict[str, list[StandardAcl]] = {}
        self.prefixed: dict[str, list[StandardAcl]] = {}
        self.prefixes: list[str] = []
        self.found: dict[str, list[list[StandardAcl]]] = {}

    def add(self, acl: StandardAcl) -> None:
        self.found = {}
        by_name = self.literal if acl.pattern_type == _LITERAL else self.prefixed
        group = by_name.get(acl.resource_name)
        if group is None:
            group = by_name[acl.resource_name] = []
            if by_name is self.prefixed:
                insort(self.prefixes, acl.resource_name)
        group.append(acl)

    def remove(self, acl: StandardAcl) -> None:
        self.found = {}
        by_name = self.literal if acl.pattern_type == _LITERAL else self.prefixed
        group = by_name[acl.resource_name]
        group.remove(acl)
        if not group:
            del by_name[acl.resource_name]
            if by_name is self.prefixed:
                names = self.prefixes
                del names[bisect_right(names, acl.resource_name) - 1]

    def applicable(self, name: str) -> list[list[StandardAcl]]:
        found = self.found.get(name)
        if found is None:
            found = self._applicable(name)
            if len(self.found) >= self.CACHED:
                self.found = {}
            self.found[name] = found
        return found

    def _applicable(self, name: str) -> list[list[StandardAcl]]:
        """The ACL groups that apply to the resource ``name``: LITERAL on the name, LITERAL on
        the wildcard, PREFIXED on a prefix of the name. The prefixes are found as Kafka finds
        them: a bisection to the greatest PREFIXED name not after ``name``, then down the sorted
        names, jumping past those that share only part of ``name`` by bisection again (to the
        greatest name not after the part they share)."""
        out = []
        group = self.literal.get(name)
        if group is not None:
            out.append(group)
        if name != WILDCARD_RESOURCE:
            group = self.literal.get(WILDCARD_RESOURCE)
            if group is not None:
                out.append(group)
        names = self.prefixes
        if not names:
            return out
        prefixed = self.prefixed
        i = bisect_right(names, name) - 1
        while i >= 0:
            candidate = names[i]
            if name.startswith(candidate):
                out.append(prefixed[candidate])
                i -= 1
                continue
            # the length of the common prefix, by bisection on slices (C speed, few steps)
            lo, hi = 0, min(len(name), len(candidate))
            while lo < hi:
                mid = (lo + hi + 1) >> 1
                if name[:mid] == candidate[:mid]:
                    lo = mid
                else:
                    hi = mid - 1
            i = bisect_right(names, name[:lo], 0, i) - 1
        return out


class StandardAuthorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        loading_complete: bool = True,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # Kafka's broker answers nothing but super users until its first metadata load
        # completes (completeInitialLoad); a driver that replays the log first sets False
        self.loading_complete = loading_complete
        self._by_id: dict[object, StandardAcl] = {}
        self._present: set[StandardAcl] = set()
        self._sections: dict[ResourceType, _Section] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, object], loading_complete: bool = True) -> StandardAuthorizer:
        """``super.users`` (``User:a;User:b``, each checked as a principal) and
        ``allow.everyone.if.no.acl.found``, read as Kafka's StandardAuthorizer.configure."""
        users = set()
        for value in str(config.get(SUPER_USERS_CONFIG) or "").split(";"):
            value = value.strip()
            if value:
                parse_principal(value)
                users.add(value)
        allow = str(config.get(ALLOW_EVERYONE_IF_NO_ACL_IS_FOUND_CONFIG) or "false").strip().lower() == "true"
        return cls(users, allow, loading_complete)

    # -- the ACLs, as the metadata log's records add and remove them ---------------------------

    def add_acl(self, acl_id: object, acl: StandardAcl) -> None:
        """AccessControlEntryRecord replayed (AclCache.addAcl: an id or an ACL seen twice is a bug)."""
        if acl_id in self._by_id:
            raise ValueError(f"An ACL with ID {acl_id} already exists.")
        if acl in self._present:
            raise ValueError(f"Unable to add the ACL with ID {acl_id} to aclsByResource")
        self._by_id[acl_id] = acl
        self._present.add(acl)
        section = self._sections.get(acl.resource_type)
        if section is None:
            section = self._sections[acl.resource_type] = _Section()
        section.add(acl)

    def remove_acl(self, acl_id: object) -> StandardAcl:
        """RemoveAccessControlEntryRecord replayed."""
        acl = self._by_id.pop(acl_id, None)
        if acl is None:
            raise ValueError(f"ID {acl_id} not found in aclsById.")
        self._present.discard(acl)
        self._sections[acl.resource_type].remove(acl)
        return acl

    def load_snapshot(self, acls: Mapping[object, StandardAcl]) -> None:
        """All the ACLs at once (a metadata snapshot), replacing what was there."""
        self._by_id, self._present, self._sections = {}, set(), {}
        for acl_id, acl in acls.items():
            self.add_acl(acl_id, acl)

    def complete_initial_load(self) -> None:
        self.loading_complete = True

    def acl_count(self) -> int:
        return len(self._by_id)

    def acls(self, filt: AclBindingFilter = AclBindingFilter.ANY) -> list[AclBinding]:
        """The ACLs a DescribeAcls filter matches, in Kafka's order (see :func:`_compare`)."""
        return [acl.to_binding() for acl in sorted(self._by_id.values(), key=_ORDER) if filt.matches(acl.to_binding())]

    def matching_ids(self, filt: AclBindingFilter) -> list[object]:
        """The ids of the ACLs a DeleteAcls filter removes."""
        return [acl_id for acl_id, acl in self._by_id.items() if filt.matches(acl.to_binding())]

    # -- decisions -----------------------------------------------------------------------------

    def authorize(self, ctx, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """The server's Authorizer seam: ``ctx`` has ``principal`` and ``client_host``."""
        return self.authorize_action(ctx.principal, ctx.client_host, operation, resource_type, name)

    def authorize_action(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """May ``principal`` connected from ``host`` do ``operation`` on the LITERAL resource
        ``resource_type:name``? (Kafka's StandardAuthorizerData.authorize.)"""
        who = f"{principal.type}:{principal.name}"
        if who in self.super_users:
            return True
        if not self.loading_complete:
            raise AuthorizerNotReady()
        section = self._sections.get(resource_type)
        groups = section.applicable(name) if section is not None else None
        if not groups:  # no ACL on this resource for anyone
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for group in groups:
            for acl in group:
                verdict = _result(acl, operation, who, host)
                if verdict is _DENY:
                    return False
                if verdict is _ALLOW:
                    allowed = True
        return allowed

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do ``operation`` on at
        least one resource of this type? (InitProducerId without a transactional id, KIP-679.)
        Super users and allowing defaults first, by a check on a made-up name; then an ALLOW
        counts unless a DENY on the same literal name or on a prefix of it dominates it."""
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN) or resource_type in (
            ResourceType.ANY,
            ResourceType.UNKNOWN,
        ):
            raise ValueError(f"Unknown operation or resource type: {operation.name} {resource_type.name}")
        if self.authorize_action(principal, host, operation, resource_type, "hardcode"):
            return True
        who = str(principal)
        deny = {_LITERAL: set(), _PREFIXED: set()}
        allow = {_LITERAL: set(), _PREFIXED: set()}
        wildcard_allow = False
        section = self._sections.get(resource_type)
        groups = [*section.literal.values(), *section.prefixed.values()] if section else ()
        for group in groups:
            for acl in group:
                if acl.host != host and acl.host != WILDCARD_HOST:
                    continue
                if acl.principal != who and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.operation != operation and acl.operation != AclOperation.ALL:
                    continue
                if acl.pattern_type not in deny:
                    continue
                if acl.permission_type == _DENY:
                    if acl.pattern_type == _LITERAL and acl.resource_name == WILDCARD_RESOURCE:
                        return False
                    deny[acl.pattern_type].add(acl.resource_name)
                elif acl.permission_type == _ALLOW:
                    if acl.pattern_type == _LITERAL and acl.resource_name == WILDCARD_RESOURCE:
                        wildcard_allow = True
                    else:
                        allow[acl.pattern_type].add(acl.resource_name)
        if wildcard_allow:
            return True
        for ptype, names in allow.items():
            for name in names:
                if ptype == _LITERAL and name in deny[_LITERAL]:
                    continue
                if not any(name[:i] in deny[_PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False


def _result(acl: StandardAcl, operation: AclOperation, who: str, host: str):
    """StandardAuthorizerData.findResult: ALLOW, DENY, or None when the ACL does not apply."""
    if acl.principal != who and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    op = acl.operation
    if op != AclOperation.ALL:
        if acl.permission_type == _ALLOW:
            if operation == AclOperation.DESCRIBE:
                if op not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != op:
                return None
        elif operation != op:
            return None
    return _ALLOW if acl.permission_type == _ALLOW else _DENY
