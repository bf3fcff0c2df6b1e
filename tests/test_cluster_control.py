"""kesque.controller.cluster_control: registration, heartbeats, fencing and controlled shutdown
on the active controller, with Kafka's rules and error codes."""

from __future__ import annotations

import io
import uuid

import pytest
from kio.serial import entity_reader, entity_writer

from kesque.controller import cluster_control as cc
from kesque.controller.cluster_control import (
    ClusterControl,
    HeartbeatReply,
    HeartbeatRequest,
    RegistrationReply,
    RegistrationRequest,
)
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata.image import Delta, Endpoint, MetadataImage

CLUSTER = "q1Yx3ZbKQ1u2l7V0mXz0aA"
FEATURES = {"metadata.version": (1, 25)}
TIMEOUT = 9000


class Controller:
    """ClusterControl over an image, the records of each call applied at once (the driver's job)."""

    def __init__(self, now=0):
        self.image = MetadataImage()
        self.image.features = {"metadata.version": 25}
        self.next_offset = 10
        self.c = ClusterControl(None, lambda: self.image, CLUSTER)
        self.c.activate(now)
        self.incarnations = {}

    def apply(self, records):
        d = Delta()
        for rec in records:
            self.image.replay(rec, d)
            self.c.replay(rec, self.next_offset)
            self.next_offset += 1
        self.image.offset = self.next_offset - 1
        return records

    def register(self, b, now=0, incarnation=None, **kw):
        inc = incarnation or self.incarnations.setdefault(b, uuid.uuid4())
        req = RegistrationRequest(
            b,
            kw.pop("cluster_id", CLUSTER),
            inc,
            [Endpoint("PLAINTEXT", "h", 9092 + b)],
            kw.pop("features", FEATURES),
            **kw,
        )
        records, epoch = self.c.register(req, now, self.next_offset)
        self.apply(records)
        return epoch, records

    def heartbeat(self, b, now=0, offset=None, **kw):
        epoch = kw.pop("epoch", None)
        req = HeartbeatRequest(
            b,
            self.image.brokers[b].epoch if epoch is None else epoch,
            self.image.offset if offset is None else offset,
            **kw,
        )
        records, reply = self.c.heartbeat(req, now, self.next_offset)
        self.apply(records)
        return reply, records

    def unfenced_broker(self, b, now=0):
        self.register(b, now)
        reply, _ = self.heartbeat(b, now)
        assert not reply.is_fenced
        return b

    def topic(self, name, *assignments):
        tid = uuid.uuid4()
        self.apply(
            [{"type": "TopicRecord", "name": name, "topic_id": tid}]
            + [
                {
                    "type": "PartitionRecord",
                    "partition_id": p,
                    "topic_id": tid,
                    "replicas": reps,
                    "isr": reps,
                    "removing_replicas": [],
                    "adding_replicas": [],
                    "leader": reps[0],
                    "leader_recovery_state": 0,
                    "leader_epoch": 0,
                    "partition_epoch": 0,
                }
                for p, reps in enumerate(assignments)
            ]
        )
        return tid

    def part(self, name, p=0):
        return self.image.topic(name).partitions[p]


def code(exc_info) -> ErrorCode:
    return exc_info.value.code


# -- registration ---------------------------------------------------------------------------------
def test_a_new_registration_starts_fenced_with_the_offset_of_its_record_as_epoch():
    h = Controller()
    epoch, records = h.register(1)
    assert epoch == 10 and records[-1]["broker_epoch"] == 10 and records[-1]["fenced"] is True
    assert h.image.brokers[1].fenced


def test_unfenced_only_once_caught_up_with_its_registration():
    h = Controller()
    h.register(1)
    reply, records = h.heartbeat(1, offset=9)  # the RegisterBrokerRecord is at 10
    assert (reply.is_caught_up, reply.is_fenced, records) == (False, True, [])
    reply, _ = h.heartbeat(1, offset=10, want_fence=True)  # caught up, but not ready yet
    assert reply.is_caught_up and reply.is_fenced
    reply, records = h.heartbeat(1, offset=10)
    assert reply.is_caught_up and not reply.is_fenced
    assert records[0] == {
        "type": "BrokerRegistrationChangeRecord",
        "broker_id": 1,
        "broker_epoch": 10,
        "fenced": -1,
        "in_controlled_shutdown": 0,
    }
    assert not h.image.brokers[1].fenced


def test_another_incarnation_with_a_live_session_is_a_duplicate():
    h = Controller()
    h.unfenced_broker(1, now=0)
    with pytest.raises(KafkaError) as e:
        h.register(1, now=TIMEOUT, incarnation=uuid.uuid4())
    assert code(e) == ErrorCode.duplicate_broker_registration
    assert str(e.value) == "Another broker is registered with that broker id."
    epoch, _ = h.register(1, now=TIMEOUT + 1, incarnation=uuid.uuid4())  # session expired: a new incarnation
    assert epoch > 10 and h.image.brokers[1].fenced


def test_a_fenced_broker_has_no_session_to_protect():
    h = Controller()
    h.register(1)
    epoch, _ = h.register(1, now=1, incarnation=uuid.uuid4())
    assert epoch == 11


def test_the_same_incarnation_amends_its_registration_and_keeps_its_state():
    h = Controller()
    h.unfenced_broker(1)
    epoch, records = h.register(1, now=5)
    assert epoch == 10 and records[-1]["fenced"] is False
    assert not h.image.brokers[1].fenced


def test_a_new_incarnation_takes_over_the_partitions_it_led():
    h = Controller()
    for b in (1, 2):
        h.unfenced_broker(b)
    h.topic("t", [1, 2], [2, 1], [1])
    h.c.sessions[1].last_contact = -TIMEOUT - 1  # its session ran out, not yet expired
    at = h.next_offset
    epoch, records = h.register(1, now=0, incarnation=uuid.uuid4())
    assert (h.part("t", 0).leader, h.part("t", 0).isr) == (2, [2])
    assert (h.part("t", 1).leader, h.part("t", 1).isr) == (2, [2])
    assert (h.part("t", 2).leader, h.part("t", 2).isr) == (-1, [1])
    assert epoch == at + len(records) - 1 and len(records) == 4  # the offset of its RegisterBrokerRecord


def test_cluster_id_must_match():
    h = Controller()
    with pytest.raises(KafkaError) as e:
        h.register(1, cluster_id="other")
    assert code(e) == ErrorCode.inconsistent_cluster_id
    assert str(e.value) == f"Expected cluster ID {CLUSTER}, but got cluster ID other"


@pytest.mark.parametrize("features", [{"metadata.version": (1, 24)}, {}, {"metadata.version": (26, 30)}])
def test_a_broker_must_support_every_finalized_feature_level(features):
    h = Controller()
    with pytest.raises(KafkaError) as e:
        h.register(1, features=features)
    assert code(e) == ErrorCode.unsupported_version
    assert "does not support finalized version 25 of metadata.version" in str(e.value)


def test_an_unknown_finalized_feature_needs_a_range():
    h = Controller()
    h.image.features["group.version"] = 1
    with pytest.raises(KafkaError, match="finalized version 1 of group.version"):
        h.register(1)
    h.register(1, features={**FEATURES, "group.version": (0, 1)})


# -- heartbeats -----------------------------------------------------------------------------------
def test_stale_broker_epoch():
    h = Controller()
    h.register(1)
    with pytest.raises(KafkaError) as e:
        h.heartbeat(1, epoch=9)
    assert code(e) == ErrorCode.stale_broker_epoch
    assert str(e.value) == "Expected broker epoch 10, but got broker epoch 9"
    with pytest.raises(KafkaError) as e:
        h.c.heartbeat(HeartbeatRequest(7, 10, 10), 0, h.next_offset)
    assert code(e) == ErrorCode.stale_broker_epoch


def test_unfencing_elects_it_where_it_is_the_only_isr_member_left():
    h = Controller()
    h.unfenced_broker(1)
    h.unfenced_broker(2)
    h.topic("t", [1, 2], [2, 1])
    h.apply(h.c.heartbeat(HeartbeatRequest(1, 10, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    assert (h.part("t", 0).leader, h.part("t", 0).isr) == (2, [2])
    h.apply(h.c.heartbeat(HeartbeatRequest(2, 12, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    assert (h.part("t", 0).leader, h.part("t", 0).isr) == (-1, [2])  # the last ISR member stays
    reply, _ = h.heartbeat(2)
    assert not reply.is_fenced
    assert (h.part("t", 0).leader, h.part("t", 1).leader) == (2, 2)


def test_want_shut_down_when_fenced_is_granted_at_once():
    h = Controller()
    h.register(1)
    reply, _ = h.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced


# -- session expiry -------------------------------------------------------------------------------
def test_expiry_fences_after_the_session_timeout_and_moves_leadership():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3], [2, 1, 3], [1])
    h.heartbeat(2, now=5000)
    h.heartbeat(3, now=5000)
    assert h.c.next_deadline() == TIMEOUT + 1
    assert h.c.expire(TIMEOUT) == []
    records = h.apply(h.c.expire(TIMEOUT + 1))
    assert records[-1] == {
        "type": "BrokerRegistrationChangeRecord",
        "broker_id": 1,
        "broker_epoch": 10,
        "fenced": 1,
        "in_controlled_shutdown": 0,
    }
    assert h.image.brokers[1].fenced
    p0, p1, p2 = (h.part("t", i) for i in range(3))
    assert (p0.leader, p0.isr, p0.leader_epoch) == (2, [2, 3], 1)  # first ISR replica in order
    assert (p1.leader, p1.isr, p1.leader_epoch) == (2, [2, 3], 0)  # ISR shrink: no epoch bump
    assert (p2.leader, p2.isr) == (-1, [1])  # no one else: leaderless
    assert h.c.next_deadline() == 5000 + TIMEOUT + 1


def test_expiry_fences_one_broker_per_call_each_seeing_the_last():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3])
    h.heartbeat(3, now=5000)
    first = h.apply(h.c.expire(TIMEOUT + 1))
    assert first[-1]["broker_id"] == 1
    assert h.part("t").leader == 2  # still registered unfenced (Kafka's isActive)
    second = h.apply(h.c.expire(TIMEOUT + 1))
    assert second[-1]["broker_id"] == 2 and h.part("t").leader == 3
    assert h.c.expire(TIMEOUT + 1) == []


def test_activation_gives_every_broker_a_fresh_session():
    h = Controller()
    h.unfenced_broker(1)
    h.c.deactivate()
    with pytest.raises(KafkaError) as e:
        h.c.expire(50_000)
    assert code(e) == ErrorCode.not_controller
    assert h.c.next_deadline() == cc.UNBOUNDED
    h.c.activate(50_000)
    assert h.c.expire(50_000 + TIMEOUT) == []
    assert h.c.next_deadline() == 50_000 + TIMEOUT + 1


# -- controlled shutdown --------------------------------------------------------------------------
def test_controlled_shutdown_moves_leadership_then_lets_the_broker_go():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2], [2, 1], [1])
    reply, records = h.heartbeat(1, now=100, want_shut_down=True)
    assert reply.in_controlled_shutdown and not reply.should_shut_down and not reply.is_fenced
    assert records[0]["in_controlled_shutdown"] == 1 and h.image.brokers[1].in_controlled_shutdown
    assert (h.part("t", 0).leader, h.part("t", 0).isr) == (2, [2])
    assert (h.part("t", 1).leader, h.part("t", 1).isr) == (2, [2])
    assert (h.part("t", 2).leader, h.part("t", 2).isr) == (-1, [1])
    shutdown_offset = h.image.offset
    # it leads nothing now, but the other brokers have not seen the moves yet (all of them)
    reply, _ = h.heartbeat(1, now=200, want_shut_down=True)
    assert not reply.should_shut_down
    h.heartbeat(2, now=210, offset=shutdown_offset - 1)
    h.heartbeat(3, now=210, offset=shutdown_offset - 1)
    reply, _ = h.heartbeat(1, now=220, want_shut_down=True)
    assert not reply.should_shut_down
    h.heartbeat(2, now=250, offset=shutdown_offset)
    reply, _ = h.heartbeat(1, now=300, want_shut_down=True)
    assert not reply.should_shut_down  # broker 3 is still behind
    h.heartbeat(3, now=350, offset=shutdown_offset)
    reply, records = h.heartbeat(1, now=400, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced and h.image.brokers[1].fenced


def test_a_broker_leading_nothing_shuts_down_at_once():
    h = Controller()
    h.unfenced_broker(1)
    h.unfenced_broker(2)
    h.topic("t", [2, 1])
    reply, _ = h.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and h.image.brokers[1].fenced
    assert h.part("t").isr == [2]


def test_a_broker_in_controlled_shutdown_is_never_elected():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3], [3, 2, 1])
    h.heartbeat(2, want_shut_down=True)
    h.apply(h.c.heartbeat(HeartbeatRequest(1, 10, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    assert h.part("t", 0).leader == 3


# -- the wire -------------------------------------------------------------------------------------
def through_kio(obj):
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    back, _ = entity_reader(type(obj))(buf.getvalue(), 0)
    return back


@pytest.mark.parametrize("version", range(0, 5))
def test_registration_through_kio(version):
    req = RegistrationRequest(
        3,
        CLUSTER,
        uuid.uuid4(),
        [Endpoint("PLAINTEXT", "localhost", 9092, 0)],
        {"metadata.version": (1, 25), "group.version": (0, 1)},
        "r1",
        42,
    )
    back = cc.from_kio(through_kio(cc.to_kio(req, version)))
    if version < 3:
        req.previous_broker_epoch = -1
    if version < 4:
        del req.features["group.version"]  # v0-v3 leave out features whose minimum is 0
    assert back == req
    reply = RegistrationReply(int(ErrorCode.duplicate_broker_registration), -1)
    assert cc.from_kio(through_kio(cc.to_kio(reply, version))) == reply


@pytest.mark.parametrize("version", range(0, 2))
def test_heartbeat_through_kio(version):
    req = HeartbeatRequest(3, 42, 1000, want_fence=True, want_shut_down=False)
    assert cc.from_kio(through_kio(cc.to_kio(req, version))) == req
    reply = HeartbeatReply(0, True, False, True)
    assert cc.from_kio(through_kio(cc.to_kio(reply, version))) == reply
    with pytest.raises(KafkaError):
        cc.to_kio(req, 9)


def test_lifecycle_config_from_broker_config():
    from kesque.config.broker import BrokerConfig

    c = cc.LifecycleConfig.of(
        BrokerConfig({"broker.session.timeout.ms": "3000", "controlled.shutdown.enable": "false"})
    )
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.controlled_shutdown_enable) == (3000, 2000, False)


def test_only_an_isr_member_is_elected():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3])
    h.apply(
        [
            {
                "type": "PartitionChangeRecord",
                "topic_id": h.image.topic("t").topic_id,
                "partition_id": 0,
                "isr": [1, 3],
                "leader": -2,
                "replicas": None,
                "removing_replicas": None,
                "adding_replicas": None,
                "leader_recovery_state": -1,
            }
        ]
    )
    h.heartbeat(1, want_fence=True)
    assert (h.part("t").leader, h.part("t").isr) == (3, [3])


def test_a_new_controller_does_not_elect_a_broker_in_controlled_shutdown():
    """The new active controller's sessions start unfenced from the image; the image's
    in_controlled_shutdown still excludes the broker, even where it is in an ISR."""
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3])
    h.image.brokers[2].in_controlled_shutdown = True
    h.c.deactivate()
    h.c.activate(100)
    h.heartbeat(1, now=100, want_fence=True)
    assert h.part("t", 0).leader == 3


def test_a_broker_whose_session_is_shutting_down_is_not_elected():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [1, 2, 3])
    h.c.sessions[2].shutdown_offset = 5  # its controlled shutdown began, not yet in the image
    h.heartbeat(1, want_fence=True)
    assert h.part("t", 0).leader == 3


def test_unregister_moves_leadership_then_removes_the_registration():
    h = Controller()
    for b in (1, 2):
        h.unfenced_broker(b)
    h.topic("t", [1, 2])
    with pytest.raises(KafkaError) as e:
        h.c.unregister(7)
    assert code(e) == ErrorCode.broker_id_not_registered
    records = h.apply(h.c.unregister(1))
    assert records[-1] == {"type": "UnregisterBrokerRecord", "broker_id": 1, "broker_epoch": 10}
    assert 1 not in h.image.brokers
    p = h.part("t")
    assert (p.leader, p.isr) == (2, [2])


# -- unclean.leader.election.enable (Kafka's generateLeaderAndIsrUpdates with UNCLEAN) ----------------------
def unclean_controller(topics=("u",)):
    h = Controller()
    h.c.unclean_enabled = lambda topic: topic in topics
    for b in (1, 2):
        h.unfenced_broker(b)
    return h


def test_fencing_the_last_isr_member_elects_an_out_of_sync_replica_where_the_topic_allows_it():
    h = unclean_controller()
    h.topic("u", [1, 2])
    h.topic("clean", [1, 2])
    for name in ("u", "clean"):
        t = h.image.topic(name)
        h.apply(
            [
                {
                    "type": "PartitionChangeRecord",
                    "topic_id": t.topic_id,
                    "partition_id": 0,
                    "isr": [1],
                    "leader": -2,
                    "replicas": None,
                    "removing_replicas": None,
                    "adding_replicas": None,
                    "leader_recovery_state": -1,
                }
            ]
        )
    h.apply(h.c.heartbeat(HeartbeatRequest(1, 10, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    u, clean = h.part("u"), h.part("clean")
    assert (u.leader, u.isr, u.leader_recovery_state) == (2, [2], 1)  # unclean: RECOVERING
    assert (clean.leader, clean.isr) == (-1, [1])


def test_unfencing_elects_an_out_of_sync_replica_of_a_leaderless_partition_where_allowed():
    h = unclean_controller()
    h.topic("u", [1, 2])
    h.topic("clean", [1, 2])
    h.apply(h.c.heartbeat(HeartbeatRequest(2, 12, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    h.apply(h.c.heartbeat(HeartbeatRequest(1, 10, h.image.offset, want_fence=True), 0, h.next_offset)[0])
    assert (h.part("u").leader, h.part("u").isr) == (-1, [1])
    reply, _ = h.heartbeat(2)
    assert not reply.is_fenced
    assert (h.part("u").leader, h.part("u").isr) == (2, [2])
    assert (h.part("clean").leader, h.part("clean").isr) == (-1, [1])


# -- KIP-966 (ELR on): fencing keeps the last ISR member eligible, an unclean shutdown does not --------
ELR_FEATURES = {"metadata.version": (1, 25), "eligible.leader.replicas.version": (0, 1)}


def elr_controller():
    h = Controller()
    h.image.features = {"metadata.version": 25, "eligible.leader.replicas.version": 1}
    for b in (1, 2):
        h.register(b, features=ELR_FEATURES)
        h.heartbeat(b)
    h.topic("t", [1, 2])
    return h


def test_with_elr_a_fenced_last_isr_member_stays_eligible_and_leads_again_once_back():
    h = elr_controller()
    h.apply(h.c.expire(TIMEOUT + 1))  # both sessions expire: one broker per call
    h.apply(h.c.expire(TIMEOUT + 1))
    p = h.part("t")
    # min ISR 1: the first fenced broker leaves an ISR still at min ISR (not eligible); the last
    # one empties it and stays eligible, and is the last known leader
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, [], [2], [2])
    reply, _ = h.heartbeat(1, now=TIMEOUT + 2)
    assert not reply.is_fenced and h.part("t").leader == -1  # not eligible
    # the same incarnation heartbeats again (a clean return): elected from the ELR, ISR itself
    reply, _ = h.heartbeat(2, now=TIMEOUT + 2)
    p = h.part("t")
    assert not reply.is_fenced and (p.leader, p.isr, p.elr, p.last_known_elr) == (2, [2], [], [])


@pytest.mark.parametrize("clean", [True, False])
def test_a_new_incarnation_after_an_unclean_shutdown_leaves_the_elr(clean):
    h = elr_controller()
    h.apply(h.c.expire(TIMEOUT + 1))
    h.apply(h.c.expire(TIMEOUT + 1))
    epoch = h.image.brokers[2].epoch
    h.register(
        2,
        now=TIMEOUT + 2,
        incarnation=uuid.uuid4(),
        features=ELR_FEATURES,
        previous_broker_epoch=epoch if clean else -1,
    )
    p = h.part("t")
    assert p.elr == ([2] if clean else []) and p.leader == -1


def test_balanced_recovery_elects_the_last_known_leader_once_the_isr_and_elr_are_empty():
    """Both brokers come back after unclean shutdowns: nobody is eligible, and the last known
    leader is elected when it is unfenced, uncleanly (RECOVERING), as Kafka 4.4 does."""
    h = elr_controller()
    h.apply(h.c.expire(TIMEOUT + 1))
    h.apply(h.c.expire(TIMEOUT + 1))
    last = h.part("t").last_known_elr
    for b in (1, 2):
        h.register(b, now=TIMEOUT + 2, incarnation=uuid.uuid4(), features=ELR_FEATURES)
    p = h.part("t")
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, [], [], last)
    other = 3 - last[0]
    h.heartbeat(other, now=TIMEOUT + 3)
    assert h.part("t").leader == -1  # not the last known leader: not elected
    h.heartbeat(last[0], now=TIMEOUT + 3)
    p = h.part("t")
    assert (p.leader, p.isr, p.leader_recovery_state, p.last_known_elr) == (last[0], last, 1, [])
