"""The API tables from the handlers' declarations.

Each handler class declares the APIs it serves as data (``APIS``, or ``apis(config)`` when the
set depends on the config) and takes in its constructor exactly the collaborators it uses; the
server builds them all in one place (``KesqueServer._build_handlers``) and :func:`bind` turns
their declarations into its dispatch tables. :func:`served_versions` reads the same
declarations without building any handler. No handler holds the server object.
"""

from __future__ import annotations

from ...config.broker import BrokerConfig
from ...protocol.api import Api, ApiSpec
from .acls import AclApis
from .cluster_links import ClusterLinkApis
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
from .sasl import SaslApis
from .scram import ScramApis
from .share import ShareGroupApis
from .share_state import ShareStateApis
from .telemetry import TelemetryApis
from .topics import TopicApis
from .transactions import TransactionApis

# the handler classes whose APIs are declared as data
DECLARED = (
    CoreApis,
    ProduceApis,
    TransactionApis,
    FetchApis,
    OffsetApis,
    TopicApis,
    ConfigApis,
    LogDirApis,
    ShareStateApis,
    QuotaApis,
    QuorumApis,
    ReassignmentApis,
    GroupApis,
    ShareGroupApis,
    AclApis,
    SaslApis,
    ScramApis,
    ClusterLinkApis,
    TelemetryApis,
)


def declared(cls, config) -> tuple[Api, ...]:
    """The APIs handler class ``cls`` serves on a broker with ``config``."""
    apis = getattr(cls, "apis", None)
    return tuple(apis(config)) if apis is not None else cls.APIS


def bind(handler, config, apis: dict, controller_apis: dict) -> None:
    """``handler``'s declared APIs into the dispatch tables (``controller_apis``: served on the
    controller listeners only, and not advertised on the others)."""
    for a in declared(type(handler), config):
        table = controller_apis if a.controller_only else apis
        if a.key in table:
            raise ValueError(f"{a.key.name} is served by two handlers")
        table[a.key] = ApiSpec(
            a.key, a.min_version, a.max_version, getattr(handler, a.method), a.raw, a.refused_below, a.advertised
        )


def served_versions(config: dict | None = None) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} that a broker with ``config`` advertises, without starting one
    (docs, tests)."""
    cfg = BrokerConfig(config or {})
    served = {
        a.key: (a.min_version, a.max_version)
        for cls in DECLARED
        for a in declared(cls, cfg)
        if not a.controller_only and a.advertised
    }
    return dict(sorted(served.items()))
