"""kesque.metadata.snapshot: a snapshot's records rebuild the image they were taken from, and the
snapshot policy fires on Kafka's byte and time rules."""

from __future__ import annotations

import dataclasses
import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kesque.metadata import records as mr
from kesque.metadata.image import Delta, MetadataImage
from kesque.metadata.snapshot import MAX_BYTES_BETWEEN_SNAPSHOTS, SnapshotPolicy, image_records


def replay(records) -> MetadataImage:
    image = MetadataImage()
    delta = Delta()
    for rec in records:
        image.replay(rec, delta)
    return image


def state(image: MetadataImage) -> dict:
    """The image's content (an emptied config set is no config)."""
    return {
        "brokers": {i: dataclasses.asdict(b) for i, b in image.brokers.items()},
        "topics": {
            t.topic_id: (t.name, {p: dataclasses.asdict(r) for p, r in t.partitions.items()})
            for t in image.topics_by_id.values()
        },
        "names": sorted(image.topics_by_name),
        "configs": {k: v for k, v in image.configs.items() if v},
        "quotas": image.client_quotas,
        "features": image.features,
        "pid": image.next_producer_id,
        "acls": image.acls,
    }


def random_history(rng: random.Random, n: int) -> list[dict]:
    """A random but well-formed metadata log: every record type the image replays."""
    out: list[dict] = []
    brokers: dict[int, int] = {}
    topics: dict[uuid.UUID, tuple[str, int]] = {}
    acls: list[uuid.UUID] = []
    for i in range(n):
        if rng.random() < 0.08:  # an ACL added, or one removed
            if acls and rng.random() < 0.4:
                out.append({"type": "RemoveAccessControlEntryRecord", "id": acls.pop(rng.randrange(len(acls)))})
            else:
                acls.append(uuid.UUID(int=rng.getrandbits(128)))
                out.append(
                    {
                        "type": "AccessControlEntryRecord",
                        "id": acls[-1],
                        "resource_type": rng.choice((2, 3, 4, 5)),
                        "resource_name": f"r{i}",
                        "pattern_type": rng.choice((3, 4)),
                        "principal": rng.choice(("User:a", "User:*")),
                        "host": "*",
                        "operation": rng.randint(2, 14),
                        "permission_type": rng.choice((2, 3)),
                    }
                )
            continue
        roll = rng.random()
        if roll < 0.12 or not brokers:
            b = rng.randint(0, 5)
            brokers[b] = i
            out.append(
                {
                    "type": "RegisterBrokerRecord",
                    "broker_id": b,
                    "incarnation_id": uuid.UUID(int=rng.getrandbits(128)),
                    "broker_epoch": i,
                    "endpoints": [{"name": "PLAINTEXT", "host": f"h{b}", "port": 9000 + b, "security_protocol": 0}],
                    "features": [],
                    "rack": rng.choice((None, "r1")),
                    "fenced": rng.random() < 0.5,
                    "in_controlled_shutdown": False,
                }
            )
        elif roll < 0.2:
            b = rng.choice(sorted(brokers))
            out.append(
                rng.choice(
                    (
                        {"type": "FenceBrokerRecord", "id": b, "epoch": brokers[b]},
                        {"type": "UnfenceBrokerRecord", "id": b, "epoch": brokers[b]},
                        {
                            "type": "BrokerRegistrationChangeRecord",
                            "broker_id": b,
                            "broker_epoch": brokers[b],
                            "fenced": rng.choice((-1, 0, 1)),
                            "in_controlled_shutdown": rng.choice((0, 1)),
                        },
                        {"type": "UnregisterBrokerRecord", "broker_id": b, "broker_epoch": brokers.pop(b)},
                    )
                )
            )
        elif roll < 0.35:
            tid = uuid.UUID(int=rng.getrandbits(128))
            name = f"t{rng.randint(0, 10**6)}"
            if any(nm == name for nm, _ in topics.values()):
                continue
            parts = rng.randint(1, 3)
            topics[tid] = (name, parts)
            out.append({"type": "TopicRecord", "name": name, "topic_id": tid})
            for p in range(parts):
                reps = rng.sample(range(6), rng.randint(1, 3))
                out.append(
                    {
                        "type": "PartitionRecord",
                        "partition_id": p,
                        "topic_id": tid,
                        "replicas": reps,
                        "isr": reps[: rng.randint(1, len(reps))],
                        "removing_replicas": [],
                        "adding_replicas": [],
                        "leader": reps[0],
                        "leader_recovery_state": 0,
                        "leader_epoch": 0,
                        "partition_epoch": 0,
                    }
                )
        elif roll < 0.6 and topics:
            tid = rng.choice(sorted(topics))
            out.append(
                {
                    "type": "PartitionChangeRecord",
                    "topic_id": tid,
                    "partition_id": rng.randrange(topics[tid][1]),
                    "isr": rng.choice((None, [rng.randint(0, 5)])),
                    "leader": rng.choice((-2, -1, rng.randint(0, 5))),
                    "replicas": None,
                    "removing_replicas": rng.choice((None, [1])),
                    "adding_replicas": None,
                    "leader_recovery_state": rng.choice((-1, 0, 1)),
                }
            )
        elif roll < 0.65 and topics:
            tid = rng.choice(sorted(topics))
            topics.pop(tid)
            out.append({"type": "RemoveTopicRecord", "topic_id": tid})
        elif roll < 0.8:
            name = rng.choice([nm for nm, _ in topics.values()] + ["", "1"])
            out.append(
                {
                    "type": "ConfigRecord",
                    "resource_type": 4 if name in ("", "1") else 2,
                    "resource_name": name,
                    "name": rng.choice(("retention.ms", "cleanup.policy")),
                    "value": rng.choice((None, "1000", "compact")),
                }
            )
        elif roll < 0.9:
            out.append(
                {
                    "type": "ClientQuotaRecord",
                    "key": rng.choice(("producer_byte_rate", "request_percentage")),
                    "entity": [{"entity_type": "client-id", "entity_name": rng.choice((None, "a", "b"))}],
                    "value": float(rng.randint(1, 100)),
                    "remove": rng.random() < 0.3,
                }
            )
        elif roll < 0.95:
            out.append(
                {
                    "type": "FeatureLevelRecord",
                    "name": rng.choice(("metadata.version", "group.version")),
                    "feature_level": rng.randint(1, 25),
                }
            )
        else:
            out.append(
                {"type": "ProducerIdsRecord", "broker_id": 1, "broker_epoch": 1, "next_producer_id": 1000 * (i + 1)}
            )
    return out


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 300))
def test_snapshot_records_rebuild_the_image(seed, n):
    image = replay(random_history(random.Random(seed), n))
    snap = image_records(image)
    assert state(replay(snap)) == state(image)
    # and they survive the binary framing the snapshot file holds
    assert state(replay(mr.decode(mr.encode(r)) for r in snap)) == state(image)


def test_snapshot_keeps_epochs_and_broker_state():
    image = replay(random_history(random.Random(5), 400))
    rebuilt = replay(image_records(image))
    assert any(p.leader_epoch > 0 for t in image.topics_by_id.values() for p in t.partitions.values())
    assert {b: (r.epoch, r.fenced, r.in_controlled_shutdown) for b, r in rebuilt.brokers.items()} == {
        b: (r.epoch, r.fenced, r.in_controlled_shutdown) for b, r in image.brokers.items()
    }


def test_policy_snapshots_after_max_bytes():
    p = SnapshotPolicy(now=0, max_interval_ms=0)
    assert p.max_bytes == MAX_BYTES_BETWEEN_SNAPSHOTS == 20 * 1024 * 1024
    assert not p.on_batch(MAX_BYTES_BETWEEN_SNAPSHOTS - 1, 10)
    assert p.on_batch(1, 20)  # reached
    assert not p.on_batch(100, 30)  # counts start again


def test_policy_snapshots_after_max_interval_when_a_batch_arrives():
    p = SnapshotPolicy(max_bytes=10**9, max_interval_ms=3_600_000, now=1000)
    assert not p.on_batch(10, 1000 + 3_599_999)
    assert p.on_batch(10, 1000 + 3_600_000)
    assert not p.on_batch(10, 1000 + 3_600_001)
    p.reset(5000)  # a snapshot loaded
    assert not p.on_batch(10, 5000 + 3_599_999)


def test_policy_defaults_and_config():
    from kesque.config.broker import BrokerConfig

    p = SnapshotPolicy.from_config(BrokerConfig({}))
    assert (p.max_bytes, p.max_interval_ms) == (20 * 1024 * 1024, 3_600_000)
    p = SnapshotPolicy.from_config(
        BrokerConfig(
            {"metadata.log.max.record.bytes.between.snapshots": "100", "metadata.log.max.snapshot.interval.ms": "0"}
        )
    )
    assert (p.max_bytes, p.max_interval_ms) == (100, 0)
    assert not p.on_batch(99, 10**12)  # interval 0: the time rule is off
