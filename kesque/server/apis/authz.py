"""Authorization helpers the handlers share.

``refused(ctx, op, type, names)`` is Kafka's ``filterByAuthorized`` turned round: the names of
those resources the principal may not act on (an empty set without an authorizer, at the cost
of one attribute test). Each name is asked once.

The requests that go on to the active controller are checked there, as Kafka's ControllerApis
checks them: the broker the client reached sends them on in an Envelope with the client's
principal (kesque/server/envelope.py) and checks nothing itself; the controller (or this node,
when its controller is the active one) answers the items the principal may not touch and runs
the others (:func:`dispatch_allowed`).
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import types
import typing

from ...errors import ErrorCode
from ...metadata.image import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from ...protocol.api import response_class
from ...protocol.api_keys import ApiKeys
from ...protocol.fetch import FetchPartitionResponse, encode_fetch_response
from ...security.acl import AclOperation, ResourceType
from ..context import CLUSTER_NAME

# Kafka's Errors messages of the authorization errors (what ``Errors.X.message()`` answers)
AUTHZ_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
}


def refused(ctx, operation: AclOperation, resource_type: ResourceType, names) -> set:
    """The names among ``names`` the request's principal may not do ``operation`` on."""
    if ctx.authorizer is None:
        return set()
    return {n for n in set(names) if not ctx.authorize(operation, resource_type, n)}


def member_refused(ctx, group_id: str, topics=None, member_id=None) -> ErrorCode | None:
    """What Kafka 4.4 asks of a ConsumerGroupHeartbeat or ShareGroupHeartbeat: READ on the group
    (GROUP_AUTHORIZATION_FAILED), then (a share member's, ``member_id`` given) a member id
    (INVALID_REQUEST: :func:`share_member_id_invalid`), then DESCRIBE on every topic the member
    subscribes to by name (TOPIC_AUTHORIZATION_FAILED); None when all is well."""
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if member_id is not None and share_member_id_invalid(member_id):
        return ErrorCode.invalid_request
    if topics and refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics):
        return ErrorCode.topic_authorization_failed
    return None


def share_member_id_invalid(member_id: str | None) -> bool:
    """Kafka 4.4's KafkaApis.isMemberIdValid, asked of a share member (ShareGroupHeartbeat,
    ShareFetch, ShareAcknowledge) once READ on its group is allowed: none, empty or longer than
    36 characters."""
    return not member_id or len(member_id) > 36


HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def described_groups(ctx, group_ids, describe, refused_group, topics_of) -> list:
    """Kafka 4.4's ConsumerGroupDescribe / ShareGroupDescribe: a group the principal may not
    DESCRIBE is answered ``refused_group(gid, GROUP_AUTHORIZATION_FAILED, None)``, ahead of the
    others (Kafka answers those first), which are ``describe(gid)``. Then, with an authorizer, a
    described group whose members are assigned a topic (``topics_of(group)``: its names) the
    principal may not DESCRIBE is answered ``refused_group(gid, TOPIC_AUTHORIZATION_FAILED,
    HIDDEN_TOPICS)`` instead: no member, no topic shown."""
    denied = [gid for gid in group_ids if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, gid)]
    out = [refused_group(gid, ErrorCode.group_authorization_failed, None) for gid in denied]
    described = [describe(gid) for gid in group_ids if gid not in denied]
    if ctx.authorizer is not None:
        names = {n for g in described for n in topics_of(g)}
        hidden = refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if hidden:
            described = [
                refused_group(g.group_id, ErrorCode.topic_authorization_failed, HIDDEN_TOPICS)
                if any(n in hidden for n in topics_of(g))
                else g
                for g in described
            ]
    return out + described


def dispatch_allowed(controllers, ctx, req, items_field: str, results_field: str, check, local):
    """Answer ``req`` where the active controller is. There ``check()`` gives the items the
    principal may not touch (index -> the result object answered for it), and ``local(sub)``, the
    handler's own path, runs the request without them; the answers are merged in the request's
    order."""
    return controllers.dispatch(ctx, req, lambda: answer_allowed(req, items_field, results_field, check(), local))


def answer_allowed(req, items_field: str, results_field: str, denied: dict, local):
    if not denied:
        return local(req)
    items = getattr(req, items_field)
    sub = dataclasses.replace(req, **{items_field: tuple(x for i, x in enumerate(items) if i not in denied)})

    async def merged():
        resp = local(sub)
        if inspect.isawaitable(resp):
            resp = await resp
        done = iter(getattr(resp, results_field))
        return dataclasses.replace(
            resp, **{results_field: tuple(denied[i] if i in denied else next(done) for i in range(len(items)))}
        )

    return merged()


def config_resource_error(ctx, resource_type: int, name: str, operation: AclOperation) -> ErrorCode | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource, as Kafka's AuthHelper: a topic's
    on the topic, a broker's (or broker logger's, or a client metrics subscription's) on the
    cluster, a group's on the group."""
    if resource_type == RESOURCE_TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
    elif resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        if not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed
    elif resource_type == RESOURCE_GROUP:
        if not ctx.authorize(operation, ResourceType.GROUP, name):
            return ErrorCode.group_authorization_failed
    return None


def cluster_action_refused(ctx):
    """Kafka's ``authorizeClusterOperation(request, CLUSTER_ACTION)`` on the controller's RPCs
    (raft, broker registration and heartbeats, AlterPartition, producer id blocks, directory
    assignments): None when the principal may, else the request's error response, the error at
    its top level and every other field its default."""
    if ctx.authorizer is None or ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return top_level_error(ctx.header.api_key, ctx.api_version, ErrorCode.cluster_authorization_failed)


def error_response(ctx, request, code: ErrorCode):
    """Kafka's ``getErrorResponse`` of ``request`` with ``code`` where the answer has a
    top-level error (every request a controller listener takes before its authorizer has
    loaded the ACLs: raft's, the brokers' registrations and heartbeats, Envelope), and Fetch's
    (:func:`fetch_error_response`); None for a request whose errors are per item."""
    key, version = ctx.header.api_key, ctx.api_version
    if key == ApiKeys.FETCH:
        return fetch_error_response(version, request, code)
    if not any(f.name == "error_code" for f in dataclasses.fields(response_class(key, version))):
        return None
    return top_level_error(key, version, code)


def fetch_error_response(version: int, req, code: ErrorCode):
    """Kafka's FetchRequest.getErrorResponse: ``code`` at the top level and, before v13, on each
    partition asked too."""
    topics = []
    if version < 13:
        topics = [
            (ft.topic, [FetchPartitionResponse(fp.partition, int(code), -1, -1, -1, [], 0) for fp in ft.partitions])
            for ft in req.topics
        ]
    return encode_fetch_response(version, int(code), getattr(req, "session_id", 0), topics)


def top_level_error(api_key: int, version: int, code: ErrorCode):
    """A response with ``code`` in its top-level error_code and the defaults elsewhere (empty
    arrays, zero numbers, null strings), as Kafka's ``getErrorResponse`` of such a request."""
    cls = response_class(api_key, version)
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        values[f.name] = code if f.name == "error_code" else _zero(hints[f.name])
    return cls(**values)


def _zero(t):
    args = typing.get_args(t)
    if isinstance(t, types.UnionType) and type(None) in args:
        return None
    if typing.get_origin(t) is tuple:
        return ()
    while hasattr(t, "__supertype__"):  # NewType
        t = t.__supertype__
    if isinstance(t, type) and issubclass(t, datetime.timedelta):
        return t.parse(datetime.timedelta(0)) if hasattr(t, "parse") else datetime.timedelta(0)
    if t is bool:
        return False
    if t is str:
        return ""
    if t is bytes:
        return b""
    return t(0)
