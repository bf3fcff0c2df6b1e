"""API handlers: thin translations between protocol messages and domain calls."""

from __future__ import annotations


def register_all(server) -> None:
    from .configs import ConfigApis
    from .core import CoreApis
    from .fetch import FetchApis
    from .groups import GroupApis
    from .logdirs import LogDirApis
    from .offsets import OffsetApis
    from .produce import ProduceApis
    from .quorum import QuorumApis
    from .quotas import QuotaApis
    from .reassignment import ReassignmentApis
    from .share import ShareGroupApis
    from .share_state import ShareStateApis
    from .topics import TopicApis
    from .transactions import TransactionApis

    for cls in (CoreApis, ProduceApis, TransactionApis, FetchApis, OffsetApis, TopicApis, ConfigApis, LogDirApis,
                GroupApis, ShareGroupApis, ShareStateApis, QuotaApis, QuorumApis, ReassignmentApis):
        cls(server).register()


def served_versions(config: dict | None = None) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} that a broker with ``config`` advertises, without starting one
    (docs, tests)."""
    from ...config.broker import BrokerConfig

    class _Registry:
        def __init__(self):
            self.config = BrokerConfig(config or {})
            self.apis = {}

        def register(self, key, lo, hi, handler, raw=False, refused_below=-1, controller_only=False):
            if not controller_only:  # the broker listener's APIs
                self.apis[key] = (lo, hi)

    reg = _Registry()
    register_all(reg)
    return dict(sorted(reg.apis.items()))
