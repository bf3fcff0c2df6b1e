"""Replication quotas (KIP-73), the sans-IO part: Kafka's SimpleRate, the leader / follower
quota checks, the throttled replica lists a broker keeps, and the follower's notion of a
replica in sync (tests/test_config.py checks the configs' validation)."""

from __future__ import annotations

import pytest

from kesque.config.broker import BrokerConfig, has_effect
from kesque.config.types import LONG_MAX
from kesque.quotas import SimpleRate
from kesque.replication.quota import ALL, ReplicationQuota, ReplicationQuotas, throttled_partitions
from kesque.replication.replica_state import FETCHING, FetchPartitionResponse, FollowerFetch
from kesque.sim.replication import MemLog

# ------------------------------------------------------------------ SimpleRate


def test_simple_rate_window_is_the_time_since_the_oldest_sample_at_least_one_window():
    r = SimpleRate(11, 1000)
    r.record(1000, 0)
    assert r.measure(0) == 1000.0  # one window, not Rate's padding to num - 1 windows
    assert r.measure(500) == 1000.0
    assert r.measure(2000) == 500.0  # 1000 bytes over 2 s
    r.record(1000, 2500)  # a new sample; the oldest still starts at 0
    assert r.measure(4000) == 500.0  # 2000 bytes over 4 s


def test_simple_rate_forgets_samples_older_than_the_window_count():
    r = SimpleRate(3, 1000)
    r.record(3000, 0)
    assert r.measure(2999) == pytest.approx(3000 / 2.999)
    assert r.measure(3000) == 0.0  # its last event is num x window old: purged


# ------------------------------------------------------------------ one quota


def test_an_unbounded_quota_is_never_exceeded():
    q = ReplicationQuota("leader")
    q.record(10**12, 0)
    assert q.bound == LONG_MAX and not q.is_exceeded(0)


def test_the_quota_is_exceeded_while_the_rate_is_above_the_bound():
    q = ReplicationQuota("leader", samples=11, window_seconds=1)
    q.set_bound(100)
    assert not q.is_exceeded(0)  # nothing recorded: the first fetch goes
    q.record(150, 0)  # the fetch overshoots the bound...
    assert q.is_exceeded(0) and q.is_exceeded(1400)
    assert not q.is_exceeded(1500)  # ...and the next waits until 150 B / 1.5 s is back at 100 B/s
    q.record(1, 1500)
    assert q.is_exceeded(1500)


def test_a_new_bound_applies_to_the_rate_measured_so_far():
    q = ReplicationQuota("follower")
    q.record(5000, 0)
    assert q.set_bound(1000) and q.is_exceeded(100)
    assert not q.set_bound(1000)
    assert q.set_bound(None) and not q.is_exceeded(100)  # removed: unbounded again


def test_only_an_out_of_sync_replica_of_a_throttled_partition_is_held_while_the_quota_is_exceeded():
    q = ReplicationQuota("leader")
    q.set_bound(10)
    q.record(1000, 0)
    assert not q.should_throttle("t", 0, in_sync=False, now_ms=0)  # no partition throttled
    q.mark_throttled("t", {0})
    assert q.should_throttle("t", 0, in_sync=False, now_ms=0)
    assert not q.should_throttle("t", 0, in_sync=True, now_ms=0)  # in-sync replicas never
    assert not q.should_throttle("t", 1, in_sync=False, now_ms=0)  # another partition
    assert not q.should_throttle("u", 0, in_sync=False, now_ms=0)  # another topic
    assert q.held == 1
    q.set_bound(None)
    assert not q.should_throttle("t", 0, in_sync=False, now_ms=0)  # within the quota
    q.mark_throttled("t", ALL)
    q.set_bound(10)
    assert q.should_throttle("t", 7, in_sync=False, now_ms=0)
    q.remove_throttle("t")
    assert not q.should_throttle("t", 7, in_sync=False, now_ms=0)


def test_the_bytes_of_throttled_partitions_count_in_sync_or_not():
    q = ReplicationQuota("leader")
    q.record_if_throttled("t", 0, 500, 0)
    assert q.rate.measure(0) == 0.0
    q.mark_throttled("t", {0})
    q.record_if_throttled("t", 1, 500, 0)
    q.record_if_throttled("t", 0, 500, 0)
    assert q.rate.measure(0) == 500.0
    assert "500 bytes recorded" in q.report(0) and q.report(0) is None


# ------------------------------------------------------------------ throttled replica lists


@pytest.mark.parametrize(
    "value,broker,expected",
    [
        ("*", 1, ALL),
        (" * ", 1, ALL),
        (", *", 1, ALL),  # Kafka's validator accepts it (the entries joined are "*")
        ("0:1,1:2,2:1", 1, {0, 2}),
        ("0:1,1:2,2:1", 2, {1}),
        ("0:1,1:2,2:1", 3, set()),  # entries for other brokers only: nothing here
        ("0:1, 1:1 ,", 1, {0, 1}),
        ("", 1, set()),
        ("10:4,2:4", 4, {2, 10}),
    ],
)
def test_a_broker_keeps_the_entries_naming_it(value, broker, expected):
    got = throttled_partitions(value, broker)
    assert got == expected if expected is ALL else got == frozenset(expected)


@pytest.mark.parametrize("value", ["abc", "0:x", "0", "0:1:2", "*,0:1"])
def test_a_bad_entry_is_an_error(value):
    with pytest.raises(ValueError):
        throttled_partitions(value, 1)


def test_topic_configs_set_and_clear_the_throttled_partitions_of_this_broker():
    qs = ReplicationQuotas(broker_id=2)
    qs.update_topic(
        "t", {"leader.replication.throttled.replicas": "0:1,0:2,1:2", "follower.replication.throttled.replicas": "*"}
    )
    assert qs.leader.throttled == {"t": frozenset({0, 1})} and qs.follower.throttled == {"t": ALL}
    qs.update_topic(
        "t", {"leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": ""}
    )
    assert qs.leader.throttled == {"t": frozenset()} and qs.follower.throttled == {}
    assert not qs.leader.is_throttled("t", 0)
    qs.update_topic("t", {"leader.replication.throttled.replicas": "junk"})  # stored before validation: ignored
    assert qs.leader.throttled == {}
    qs.update_topic("u", {"leader.replication.throttled.replicas": "*"})
    qs.remove_topic("u")
    assert qs.leader.throttled == {}


def test_rates_come_from_the_dynamic_broker_configs():
    c = BrokerConfig({"node.id": "1"})
    qs = ReplicationQuotas.from_config(c)
    qs.update_rates(c.get)
    assert qs.leader.bound == qs.follower.bound == qs.alter_log_dirs.bound == LONG_MAX
    c.set_dynamic(False, "leader.replication.throttled.rate", 500)  # the cluster default
    c.set_dynamic(True, "follower.replication.throttled.rate", 700)
    c.set_dynamic(True, "replica.alter.log.dirs.io.max.bytes.per.second", 900)
    qs.update_rates(c.get)
    assert (qs.leader.bound, qs.follower.bound, qs.alter_log_dirs.bound) == (500, 700, 900)
    c.set_dynamic(True, "leader.replication.throttled.rate", 600)  # this broker's value wins
    c.set_dynamic(True, "follower.replication.throttled.rate", None)
    qs.update_rates(c.get)
    assert (qs.leader.bound, qs.follower.bound) == (600, LONG_MAX)


def test_the_rate_keys_have_an_effect():
    for key in (
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    ):
        assert has_effect(key), key


# ------------------------------------------------------------------ the follower's notion of in sync


def test_a_follower_is_in_sync_once_a_fetch_leaves_it_no_lag_behind_the_leaders_high_watermark():
    log = MemLog()
    f = FollowerFetch(leader_id=1, leader_epoch=0, log=log)
    assert f.lag is None and not f.in_sync  # a new fetch state: not in sync (Kafka's lag None)
    f.on_response(FetchPartitionResponse(high_watermark=10, log_start_offset=0), log, lambda r: None)
    assert f.lag == 10 and not f.in_sync  # an empty answer sets the first lag
    f.on_response(FetchPartitionResponse(high_watermark=0, log_start_offset=0), log, lambda r: None)
    assert f.lag == 10  # and no later empty answer changes it, as Kafka's
    f.on_out_of_range(0, 0, log)
    assert f.lag == 0 and f.in_sync and f.state == FETCHING
