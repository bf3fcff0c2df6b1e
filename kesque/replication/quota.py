"""Replication quotas (KIP-73, Kafka's ReplicationQuotaManager), sans-IO.

A broker has three byte-rate quotas on replication traffic:

- **leader**: bytes this broker sends to followers, bounded by the dynamic broker config
  ``leader.replication.throttled.rate``;
- **follower**: bytes this broker fetches as a follower, bounded by
  ``follower.replication.throttled.rate``;
- **alter-log-dirs**: bytes copied between this broker's log dirs (AlterReplicaLogDirs),
  bounded by ``replica.alter.log.dirs.io.max.bytes.per.second``.

Each bound is the broker's own dynamic value, else the cluster default, else unbounded (Kafka's
Long.MAX_VALUE); a change applies at once. The rate is Kafka's SimpleRate over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``
(``alter.log.dirs.replication.quota.*`` for the third): the bytes recorded in the live samples
over the time since the oldest began, at least one sample window. The quota is *exceeded* while
that rate is above the bound; bytes are recorded after they were sent or received, whatever the
bound, so one fetch may overshoot by its size and the next waits until the rate falls back.

Which partitions the leader and follower quotas apply to comes from the topic configs
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``:
``*`` (every partition of the topic) or ``partition:broker`` entries, of which a broker keeps
those naming its own id (Kafka's TopicConfigHandler). A throttled partition is held back only
while its replica is *not in sync* and the quota is exceeded (Kafka's shouldLeaderThrottle /
shouldFollowerThrottle), so in-sync replicas, and acks=all producers waiting on them, are never
slowed; their bytes count all the same. The copy between log dirs is held back whenever its
quota is exceeded.

Nothing here does I/O or reads a clock: times are passed in (milliseconds, monotonic).
"""

from __future__ import annotations

import logging

from ..config.types import LONG_MAX
from ..quotas import SimpleRate

log = logging.getLogger(__name__)

ALL = "*"  # every partition of a topic is throttled

LEADER, FOLLOWER, ALTER_LOG_DIRS = "leader", "follower", "alter-log-dirs"
RATE_KEYS = {
    LEADER: "leader.replication.throttled.rate",
    FOLLOWER: "follower.replication.throttled.rate",
    ALTER_LOG_DIRS: "replica.alter.log.dirs.io.max.bytes.per.second",
}
REPLICAS_KEYS = {
    LEADER: "leader.replication.throttled.replicas",
    FOLLOWER: "follower.replication.throttled.replicas",
}


def throttled_partitions(value: str, broker_id: int):
    """The partitions of a ``*.replication.throttled.replicas`` value that ``broker_id``
    throttles: :data:`ALL`, or a frozenset of partition ids (empty: none). Raises ValueError
    for a value the topic config validator refuses."""
    tokens = [t.strip() for t in value.split(",")]
    if "".join(tokens) == ALL:
        return ALL
    out = set()
    for t in tokens:
        if not t:
            continue
        partition, sep, broker = t.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError(f"not a [partitionId]:[brokerId] entry: {t!r}")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


def _describe(partitions) -> str:
    return "every partition" if partitions is ALL else f"partitions {sorted(partitions)}"


class ReplicationQuota:
    """One quota (Kafka's ReplicationQuotaManager): the bound, the measured rate, and the
    throttled partitions by topic."""

    __slots__ = ("kind", "rate", "bound", "throttled", "recorded", "held")

    def __init__(self, kind: str, samples: int = 11, window_seconds: int = 1):
        self.kind = kind
        self.rate = SimpleRate(samples, window_seconds * 1000)
        self.bound = LONG_MAX  # bytes per second; LONG_MAX: unbounded
        self.throttled: dict[str, object] = {}  # topic -> ALL or frozenset of partitions
        self.recorded = 0  # bytes recorded since the last report
        self.held = 0  # partitions held back since the last report

    # ------------------------------------------------------------------ settings
    def set_bound(self, bound: int | None) -> bool:
        """The new bound (None: unbounded); whether it changed. The samples are kept."""
        bound = LONG_MAX if bound is None else bound
        changed = bound != self.bound
        self.bound = bound
        return changed

    def mark_throttled(self, topic: str, partitions) -> bool:
        """``partitions``: :data:`ALL` or a set of partition ids; whether anything changed."""
        partitions = partitions if partitions is ALL else frozenset(partitions)
        changed = self.throttled.get(topic) != partitions
        self.throttled[topic] = partitions
        return changed

    def remove_throttle(self, topic: str) -> bool:
        return self.throttled.pop(topic, None) is not None

    # ------------------------------------------------------------------ the checks
    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts is ALL or partition in parts)

    def is_exceeded(self, now_ms: int) -> bool:
        if self.bound >= LONG_MAX:
            return False
        return self.rate.measure(now_ms) > self.bound

    def holds(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: is the partition held back (no
        records to or from it this fetch)? Only a replica out of sync, of a throttled
        partition, while the quota is exceeded."""
        return not in_sync and bool(self.throttled) and self.is_throttled(topic, partition) and self.is_exceeded(now_ms)

    def should_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """:meth:`holds`, counted in the report when it does."""
        if self.holds(topic, partition, in_sync, now_ms):
            self.held += 1
            return True
        return False

    def record(self, nbytes: int, now_ms: int) -> None:
        """Bytes sent or received (counted against the bound, never refused)."""
        self.rate.record(nbytes, now_ms)
        self.recorded += nbytes

    def record_if_throttled(self, topic: str, partition: int, nbytes: int, now_ms: int) -> None:
        """The bytes of a throttled partition, in sync or not, count against the quota."""
        if self.throttled and self.is_throttled(topic, partition):
            self.record(nbytes, now_ms)

    def report(self, now_ms: int) -> str | None:
        """A line on what was recorded or held back since the last report (None: nothing)."""
        if not self.recorded and not self.held:
            return None
        bound = "unbounded" if self.bound >= LONG_MAX else f"{self.bound} B/s"
        line = (
            f"{self.kind} replication quota ({bound}): rate {self.rate.measure(now_ms):.0f} B/s, "
            f"{self.recorded} bytes recorded, partitions held back {self.held} time(s)"
        )
        self.recorded = self.held = 0
        return line


class ReplicationQuotas:
    """A broker's replication quotas, fed from its dynamic configs and its topics' configs."""

    def __init__(
        self,
        broker_id: int,
        samples: int = 11,
        window_seconds: int = 1,
        log_dir_samples: int = 11,
        log_dir_window_seconds: int = 1,
    ):
        self.broker_id = broker_id
        self.leader = ReplicationQuota(LEADER, samples, window_seconds)
        self.follower = ReplicationQuota(FOLLOWER, samples, window_seconds)
        self.alter_log_dirs = ReplicationQuota(ALTER_LOG_DIRS, log_dir_samples, log_dir_window_seconds)
        self.by_kind = {LEADER: self.leader, FOLLOWER: self.follower, ALTER_LOG_DIRS: self.alter_log_dirs}

    @classmethod
    def from_config(cls, config) -> ReplicationQuotas:
        return cls(
            config.node_id,
            config.get("replication.quota.window.num"),
            config.get("replication.quota.window.size.seconds"),
            config.get("alter.log.dirs.replication.quota.window.num"),
            config.get("alter.log.dirs.replication.quota.window.size.seconds"),
        )

    def update_rates(self, get) -> None:
        """Kafka's BrokerConfigHandler: each bound from ``get(key)`` (this broker's dynamic
        value, else the cluster default, else None: unbounded)."""
        for kind, key in RATE_KEYS.items():
            quota = self.by_kind[kind]
            if quota.set_bound(get(key)):
                log.info(
                    "Replication quota %s on broker %d: %s",
                    key,
                    self.broker_id,
                    "unbounded" if quota.bound >= LONG_MAX else f"{quota.bound} B/s",
                )

    def update_topic(self, topic: str, configs: dict) -> None:
        """Kafka's TopicConfigHandler: the throttled partitions of ``topic`` on this broker
        from its stored configs (a missing or empty value: none)."""
        for kind, key in REPLICAS_KEYS.items():
            quota = self.by_kind[kind]
            value = configs.get(key)
            if value:
                try:
                    partitions = throttled_partitions(value, self.broker_id)
                except ValueError as e:
                    log.warning("Ignoring %s=%s of topic %s: %s", key, value, topic, e)
                    changed, partitions = quota.remove_throttle(topic), None
                else:
                    changed = quota.mark_throttled(topic, partitions)
            else:
                changed, partitions = quota.remove_throttle(topic), None
            if changed:
                log.info(
                    "Replication quota: %s",
                    f"{kind} replication of {_describe(partitions)} of topic {topic} "
                    f"is throttled on broker {self.broker_id}"
                    if partitions
                    else f"no {kind} replication of topic {topic} is throttled on broker {self.broker_id}",
                )

    def remove_topic(self, topic: str) -> None:
        for kind in REPLICAS_KEYS:
            self.by_kind[kind].remove_throttle(topic)

    def report(self, now_ms: int) -> list[str]:
        return [line for q in self.by_kind.values() if (line := q.report(now_ms)) is not None]
