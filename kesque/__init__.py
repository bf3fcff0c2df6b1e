"""kesque: a Kafka-compatible streaming platform in Python."""

__version__ = "0.1.0"


def __getattr__(name):
    # lazy (PEP 562): `import kesque` stays light; kesque.Broker / kesque.Cluster load the
    # broker only when a test or an embedding program asks for one
    if name == "Broker":
        from .testing.broker import Broker

        return Broker
    if name == "Cluster":
        from .testing.cluster import Cluster

        return Cluster
    raise AttributeError(name)
