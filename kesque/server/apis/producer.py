"""InitProducerId for idempotent producers.

A producer without a transactional id gets a fresh producer id at epoch 0 on every call,
as Kafka's coordinator does. Transactional ids arrive with the exactly-once issue; until
then they are refused with UNSUPPORTED_VERSION so clients fail fast with a clear error
instead of retrying forever.
"""

from __future__ import annotations

from ...coordinator.producer_id import ProducerIdManager
from ...errors import ErrorCode
from .kiohelp import Msg


class ProducerApis:
    def __init__(self, server):
        self.server = server
        self.ids = ProducerIdManager(lambda: server.controller.allocate_producer_ids(server.node_id,
                                                                                   server.broker_epoch))

    def register(self) -> None:
        self.server.register(22, 0, 6, self.init_producer_id)

    def init_producer_id(self, ctx, req):
        m = Msg(22, ctx.api_version)
        if req.transactional_id is not None:
            return m(throttle_time=0, error_code=ErrorCode.unsupported_version, producer_id=-1, producer_epoch=-1)
        return m(throttle_time=0, error_code=ErrorCode.none, producer_id=self.ids.generate(), producer_epoch=0)
