"""DescribeUserScramCredentials and AlterUserScramCredentials.

Describe reads the image's SCRAM credentials as Kafka's ScramImage.describe (every user when
none is named; a user named twice is DUPLICATE_RESOURCE, one without credentials
RESOURCE_NOT_FOUND); Alter goes to the controller, which validates as Kafka's
ScramControlManager and writes UserScramCredentialRecords (so every broker's SCRAM server
authenticates the user from its image, without restart). Describe needs DESCRIBE and Alter
ALTER on the cluster.
"""

from __future__ import annotations

from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...security.acl import AclOperation, ResourceType
from ...security.scram import ScramMechanism
from ..context import CLUSTER_NAME


class ScramApis:
    APIS = (
        Api(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, "describe_user_scram_credentials"),
        Api(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, "alter_user_scram_credentials"),
    )

    def __init__(self, *, image, controllers):
        self.image = image
        self.controllers = controllers

    def describe_user_scram_credentials(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            # DescribeUserScramCredentialsRequest.getErrorResponse: the error, and on each user named
            code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
            none = {"credential_infos": ()}
            failed = tuple(
                m("DescribeUserScramCredentialsResult", user="", error_code=code, error_message=message, **none)
                for _ in req.users or ()
            )
            return m(throttle_time=0, error_code=code, error_message=message, results=failed)
        by_mechanism = self.image.scram_credentials
        users: dict[str, bool] = {}  # user -> named twice
        if not req.users:
            for creds in by_mechanism.values():
                users.update(dict.fromkeys(creds, False))
        else:
            for u in req.users:
                users[u.name] = u.name in users
        results = []
        for user, duplicate in users.items():
            if duplicate:
                error = (
                    ErrorCode.duplicate_resource,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                )
                infos = ()
            else:
                infos = tuple(
                    m("CredentialInfo", mechanism=mech.type_code, iterations=creds[user].iterations)
                    for mech in ScramMechanism
                    if user in (creds := by_mechanism.get(mech.mechanism_name, {}))
                )
                error = (
                    (ErrorCode.none, None)
                    if infos
                    else (
                        ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {user}",
                    )
                )
            results.append(
                m(
                    "DescribeUserScramCredentialsResult",
                    user=user,
                    error_code=error[0],
                    error_message=error[1],
                    credential_infos=infos,
                )
            )
        return m(throttle_time=0, error_code=ErrorCode.none, error_message=None, results=tuple(results))

    def alter_user_scram_credentials(self, ctx, req):
        return self.controllers.dispatch(  # checked where the controller is (Kafka's ControllerApis)
            ctx,
            req,
            lambda: (
                self._alter(ctx, req)
                if ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
                else self._all_failed(ctx, req, KafkaError(ErrorCode.cluster_authorization_failed))
            ),
        )

    def _all_failed(self, ctx, req, error: KafkaError):
        """Kafka's AlterUserScramCredentialsRequest.getErrorResponse: each user named, once."""
        m = Msg(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
        users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        results = tuple(
            m("AlterUserScramCredentialsResult", user=u, error_code=error.code, error_message=error.message)
            for u in users
        )
        return m(throttle_time=0, results=results)

    async def _alter(self, ctx, req):
        m = Msg(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
        try:
            results = await self.controllers.call(
                "alter_user_scram_credentials",
                [(d.name, d.mechanism) for d in req.deletions],
                [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in req.upsertions],
            )
        except KafkaError as e:
            return self._all_failed(ctx, req, e)
        out = tuple(
            m(
                "AlterUserScramCredentialsResult",
                user=user,
                error_code=err.code if err else ErrorCode.none,
                error_message=err.message if err else None,
            )
            for user, err in results
        )
        return m(throttle_time=0, results=out)
