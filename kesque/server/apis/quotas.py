"""DescribeClientQuotas and AlterClientQuotas.

Describe filters the image's quota entities as Kafka's ClientQuotasImage.describe does (a
bad filter fails the whole request); Alter goes to the controller, which validates each
entity as ClientQuotaControlManager and writes ClientQuotaRecords.
"""

from __future__ import annotations

from ... import quotas as qm
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...security.acl import AclOperation, ResourceType
from ..context import CLUSTER_NAME

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def parse_filter(components) -> tuple[dict[str, str | None], set[str]]:
    """(exact matches {type: name or None for the default}, types that must be present)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        etype = c.entity_type
        if not etype:
            raise KafkaError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if etype in exact or etype in specified:
            raise KafkaError(
                ErrorCode.invalid_request, f"Entity type {etype} cannot appear more than once in the filter."
            )
        if etype not in (qm.IP, qm.USER, qm.CLIENT_ID):
            raise KafkaError(ErrorCode.unsupported_version, f"Unsupported entity type {etype}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise KafkaError(
                    ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[etype] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
            exact[etype] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
            specified.add(etype)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
    types = set(exact) | specified
    if qm.IP in types and (qm.USER in types or qm.CLIENT_ID in types):
        raise KafkaError(
            ErrorCode.invalid_request,
            "Invalid entity filter component combination. IP filter component "
            "should not be used with user or clientId filter component.",
        )
    return exact, specified


def matches(entity: dict[str, str | None], exact: dict, specified: set, strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(specified):
        return False
    return all(t in entity and entity[t] == n for t, n in exact.items()) and all(t in entity for t in specified)


class QuotaApis:
    APIS = (
        Api(ApiKeys.DESCRIBE_CLIENT_QUOTAS, 0, 1, "describe_client_quotas"),
        Api(ApiKeys.ALTER_CLIENT_QUOTAS, 0, 1, "alter_client_quotas"),
    )

    def __init__(self, *, image, controllers):
        self.image = image
        self.controllers = controllers

    def describe_client_quotas(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_CLIENT_QUOTAS, ctx.api_version)
        if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            return m(
                throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, error_message=None, entries=None
            )
        try:
            exact, specified = parse_filter(req.components)
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, error_message=e.message, entries=None)
        entries = []
        for entity, values in sorted(self.image.client_quotas.items(), key=lambda kv: repr(kv[0])):
            if matches(dict(entity), exact, specified, req.strict):
                entries.append(
                    m(
                        "EntryData",
                        entity=tuple(m("EntityData", entity_type=t, entity_name=n) for t, n in entity),
                        values=tuple(m("ValueData", key=k, value=v) for k, v in sorted(values.items())),
                    )
                )
        return m(throttle_time=0, error_code=ErrorCode.none, error_message=None, entries=tuple(entries))

    def alter_client_quotas(self, ctx, req):
        # checked where the controller is (Kafka's ControllerApis)
        return self.controllers.dispatch(ctx, req, lambda: self._checked_alter(ctx, req))

    def _checked_alter(self, ctx, req):
        if not ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            m = Msg(ApiKeys.ALTER_CLIENT_QUOTAS, ctx.api_version)
            return m(
                throttle_time=0,
                entries=tuple(
                    m(
                        "EntryData",
                        error_code=ErrorCode.cluster_authorization_failed,
                        error_message=None,
                        entity=tuple(
                            m("EntityData", entity_type=e.entity_type, entity_name=e.entity_name) for e in x.entity
                        ),
                    )
                    for x in req.entries
                ),
            )
        return self._alter_client_quotas(ctx, req)

    async def _alter_client_quotas(self, ctx, req):
        m = Msg(ApiKeys.ALTER_CLIENT_QUOTAS, ctx.api_version)
        alterations = [
            (
                [(e.entity_type, e.entity_name) for e in entry.entity],
                [(op.key, None if op.remove else op.value) for op in entry.ops],
            )
            for entry in req.entries
        ]
        try:
            results = await self.controllers.call("alter_client_quotas", alterations, req.validate_only)
        except KafkaError as e:
            results = [(entries, e) for entries, _ops in alterations]
        out = tuple(
            m(
                "EntryData",
                error_code=err.code if err else ErrorCode.none,
                error_message=err.message if err else None,
                entity=tuple(m("EntityData", entity_type=t, entity_name=n) for t, n in entries),
            )
            for entries, err in results
        )
        return m(throttle_time=0, entries=out)
