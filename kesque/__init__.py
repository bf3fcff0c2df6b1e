"""kesque: a Kafka-compatible streaming platform in Python."""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "Broker":
        from .testing.broker import Broker

        return Broker
    if name == "Cluster":
        from .testing.cluster import Cluster

        return Cluster
    raise AttributeError(name)
