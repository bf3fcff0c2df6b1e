"""SaslHandshake and SaslAuthenticate after authentication, as Kafka's KafkaApis answers them.

Before a SASL listener's connection is authenticated its frames go to its authenticator
(kesque/server/sasl.py), which answers these two APIs itself; a request that reaches a handler
came on a connection already authenticated (or on a listener without SASL), so it is answered
ILLEGAL_SASL_STATE. A SaslHandshake that starts a re-authentication (KIP-368) is taken by the
authenticator before it gets here.
"""

from __future__ import annotations

from ...errors import ErrorCode
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg


class SaslApis:
    APIS = (
        Api(ApiKeys.SASL_HANDSHAKE, 0, 1, "sasl_handshake"),
        Api(ApiKeys.SASL_AUTHENTICATE, 0, 2, "sasl_authenticate"),
    )

    def sasl_handshake(self, ctx, req):
        return Msg(ApiKeys.SASL_HANDSHAKE, ctx.api_version)(error_code=ErrorCode.illegal_sasl_state, mechanisms=())

    def sasl_authenticate(self, ctx, req):
        return Msg(ApiKeys.SASL_AUTHENTICATE, ctx.api_version)(
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
            session_lifetime=0,
        )
