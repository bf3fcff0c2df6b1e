"""DescribeAcls, CreateAcls and DeleteAcls, as Kafka's AclApis.

DescribeAcls is answered by the broker from its own authorizer (the ACLs of its image);
CreateAcls and DeleteAcls go to the active controller (in an Envelope with the client's
principal, from a broker: kesque/server/envelope.py), which checks ALTER on the cluster,
validates each creation or filter (kesque.security.acl) and writes AccessControlEntryRecord /
RemoveAccessControlEntryRecord (``Controller.create_acls``,
``delete_acls``). Every broker applies them when it replays the metadata log. A request
carrying an UNKNOWN (0) code does not parse in Kafka, and closes the connection here too;
without an authorizer each answers SECURITY_DISABLED.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...protocol.primitives import ProtocolError
from ...security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    has_unknown_code,
)
from ..context import CLUSTER_NAME

NOT_AUTHORIZED = "Cluster authorization failed."


def _filter(f) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as an AclBindingFilter."""
    if has_unknown_code(f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type):
        raise ProtocolError("DescribeAcls/DeleteAcls filter contains UNKNOWN elements")
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType.from_code(f.resource_type_filter),
            f.resource_name_filter,
            PatternType.from_code(f.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            f.principal_filter,
            f.host_filter,
            AclOperation.from_code(f.operation),
            AclPermissionType.from_code(f.permission_type),
        ),
    )


def _binding(c) -> AclBinding:
    if has_unknown_code(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type):
        raise ProtocolError("CreateAcls creation contains UNKNOWN elements")
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(c.resource_type), c.resource_name, PatternType.from_code(c.resource_pattern_type)
        ),
        AccessControlEntry(
            c.principal, c.host, AclOperation.from_code(c.operation), AclPermissionType.from_code(c.permission_type)
        ),
    )


def grouped(bindings: Iterable[AclBinding]) -> list[tuple[ResourcePattern, list[AccessControlEntry]]]:
    """DescribeAcls's resources: the bindings' patterns, each with its entries (in the order
    the authorizer lists them; Kafka's order is a Java hash map's)."""
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, []).append(b.entry)
    return list(out.items())


class AclApis:
    APIS = (
        Api(ApiKeys.DESCRIBE_ACLS, 1, 3, "describe_acls"),
        Api(ApiKeys.CREATE_ACLS, 1, 3, "create_acls"),
        Api(ApiKeys.DELETE_ACLS, 1, 3, "delete_acls"),
    )

    def __init__(self, *, authorizer, controllers):
        self.authorizer = authorizer  # the broker's StandardAuthorizer, or None
        self.controllers = controllers

    # ------------------------------------------------------------------ DescribeAcls
    def describe_acls(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_ACLS, ctx.api_version)
        filt = _filter(req)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return m(
                throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message=NOT_AUTHORIZED,
                resources=(),
            )
        if self.authorizer is None:
            return m(
                throttle_time=0,
                error_code=ErrorCode.security_disabled,
                error_message="No Authorizer is configured on the broker",
                resources=(),
            )
        resources = tuple(
            m(
                "DescribeAclsResource",
                resource_type=int(pattern.resource_type),
                resource_name=pattern.name,
                pattern_type=int(pattern.pattern_type),
                acls=tuple(
                    m(
                        "AclDescription",
                        principal=e.principal,
                        host=e.host,
                        operation=int(e.operation),
                        permission_type=int(e.permission_type),
                    )
                    for e in entries
                ),
            )
            for pattern, entries in grouped(self.authorizer.acls(filt))
        )
        return m(throttle_time=0, error_code=ErrorCode.none, error_message=None, resources=resources)

    # ------------------------------------------------------------------ CreateAcls
    def create_acls(self, ctx, req):
        bindings = [_binding(c) for c in req.creations]
        return self.controllers.dispatch(  # checked where the controller is (Kafka's ControllerApis)
            ctx,
            req,
            lambda: (
                self._create_acls(ctx, bindings)
                if ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
                else self._created(ctx, [_not_authorized()] * len(bindings))
            ),
        )

    async def _create_acls(self, ctx, bindings: list[AclBinding]):
        error = self._disabled()
        if error is None:
            try:
                results = await self.controllers.call("create_acls", bindings)
            except KafkaError as e:
                results = [e] * len(bindings)
        else:
            results = [error] * len(bindings)
        return self._created(ctx, results)

    @staticmethod
    def _created(ctx, results: list[KafkaError | None]):
        m = Msg(ApiKeys.CREATE_ACLS, ctx.api_version)
        return m(
            throttle_time=0,
            results=tuple(
                m(
                    "AclCreationResult",
                    error_code=err.code if err else ErrorCode.none,
                    error_message=err.message if err else None,
                )
                for err in results
            ),
        )

    # ------------------------------------------------------------------ DeleteAcls
    def delete_acls(self, ctx, req):
        filters = [_filter(f) for f in req.filters]
        return self.controllers.dispatch(  # checked where the controller is (Kafka's ControllerApis)
            ctx,
            req,
            lambda: (
                self._delete_acls(ctx, filters)
                if ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
                else self._deleted(ctx, [([], _not_authorized())] * len(filters))
            ),
        )

    async def _delete_acls(self, ctx, filters: list[AclBindingFilter]):
        error = self._disabled()
        if error is None:
            try:
                results = await self.controllers.call("delete_acls", filters)
            except KafkaError as e:
                results = [([], e)] * len(filters)
        else:
            results = [([], error)] * len(filters)
        return self._deleted(ctx, results)

    @staticmethod
    def _deleted(ctx, results: list[tuple[list[AclBinding], KafkaError | None]]):
        m = Msg(ApiKeys.DELETE_ACLS, ctx.api_version)
        return m(
            throttle_time=0,
            filter_results=tuple(
                m(
                    "DeleteAclsFilterResult",
                    error_code=err.code if err else ErrorCode.none,
                    error_message=err.message if err else None,
                    matching_acls=tuple(
                        m(
                            "DeleteAclsMatchingAcl",
                            error_code=ErrorCode.none,
                            error_message=None,
                            resource_type=int(b.pattern.resource_type),
                            resource_name=b.pattern.name,
                            pattern_type=int(b.pattern.pattern_type),
                            principal=b.entry.principal,
                            host=b.entry.host,
                            operation=int(b.entry.operation),
                            permission_type=int(b.entry.permission_type),
                        )
                        for b in deleted
                    ),
                )
                for deleted, err in results
            ),
        )

    def _disabled(self) -> KafkaError | None:
        if self.authorizer is None:
            return KafkaError(ErrorCode.security_disabled, "No Authorizer is configured.")
        return None


def _not_authorized() -> KafkaError:
    return KafkaError(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
