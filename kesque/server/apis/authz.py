"""Authorization helpers the handlers share, and the checks of the requests that go on to the
active controller.

``refused(ctx, op, type, names)`` is Kafka's ``filterByAuthorized`` turned round: the names of
those resources the principal may not act on (an empty set without an authorizer, at the cost
of one attribute test). Each name is asked once.

The requests that go on to the controller:

kesque forwards a client's request to the controller as it came, with no Envelope: the
controller listener takes requests as the cluster's own. So what Kafka's ControllerApis
checks with the client's principal is checked here, on the broker the client reached (its
StandardAuthorizer holds the same ACLs, from the same metadata log): the items a client may
not touch are answered here, the others are forwarded, and the answers are merged in the
request's order.
"""

from __future__ import annotations

import dataclasses

from ...errors import ErrorCode
from ...metadata.image import RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_TOPIC
from ...security.acl import AclOperation, ResourceType
from ..context import CLUSTER_NAME


def refused(ctx, operation: AclOperation, resource_type: ResourceType, names) -> set:
    """The names among ``names`` the request's principal may not do ``operation`` on."""
    if ctx.authorizer is None:
        return set()
    return {n for n in set(names) if not ctx.authorize(operation, resource_type, n)}


def dispatch_allowed(controllers, ctx, req, items_field: str, results_field: str, denied: dict, local):
    """Answer ``req`` where the active controller is, without the items at the indexes of
    ``denied`` (index -> the result object answered for it); ``local(req)`` is the handler's own
    path for the request it is given."""
    if not denied:
        return controllers.dispatch(ctx, req, lambda: local(req))
    items = getattr(req, items_field)
    sub = dataclasses.replace(req, **{items_field: tuple(x for i, x in enumerate(items) if i not in denied)})

    async def merged():
        resp = await controllers.dispatch(ctx, sub, lambda: local(sub))
        done = iter(getattr(resp, results_field))
        return dataclasses.replace(
            resp, **{results_field: tuple(denied[i] if i in denied else next(done) for i in range(len(items)))}
        )

    return merged()


def config_resource_error(ctx, resource_type: int, name: str, operation: AclOperation) -> ErrorCode | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource, as Kafka's AuthHelper: a topic's
    on the topic, a broker's (or broker logger's) on the cluster, a group's on the group."""
    if resource_type == RESOURCE_TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
    elif resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed
    elif resource_type == RESOURCE_GROUP:
        if not ctx.authorize(operation, ResourceType.GROUP, name):
            return ErrorCode.group_authorization_failed
    return None
