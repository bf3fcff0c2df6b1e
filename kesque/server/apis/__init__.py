"""API handlers: thin translations between protocol messages and domain calls."""

from __future__ import annotations


def register_all(server) -> None:
    from .configs import ConfigApis
    from .core import CoreApis
    from .fetch import FetchApis
    from .logdirs import LogDirApis
    from .offsets import OffsetApis
    from .produce import ProduceApis
    from .producer import ProducerApis
    from .topics import TopicApis

    for cls in (CoreApis, ProduceApis, ProducerApis, FetchApis, OffsetApis, TopicApis, ConfigApis, LogDirApis):
        cls(server).register()
