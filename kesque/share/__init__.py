"""Share groups (KIP-932): the leader's share partitions, share sessions and their wiring."""


def enabled(config) -> bool:
    """Share groups are served when ``group.share.enable=true`` (Kafka 4.0's switch) or when
    ``group.coordinator.rebalance.protocols`` lists ``share``."""
    return config.get("group.share.enable") or "share" in config.get("group.coordinator.rebalance.protocols")
