"""kesque.server.lifecycle: the broker's registration/heartbeat state machine (Kafka's
BrokerLifecycleManager), driven by hand and against a ClusterControl."""

from __future__ import annotations

import uuid

from kesque.controller.cluster_control import (
    ClusterControl,
    HeartbeatReply,
    HeartbeatRequest,
    LifecycleConfig,
    RegistrationRequest,
)
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata.image import Delta, MetadataImage
from kesque.server import lifecycle as lm
from kesque.server.lifecycle import BrokerLifecycle

STALE = int(ErrorCode.stale_broker_epoch)


def broker(**kw):
    cfg = LifecycleConfig(**{k: kw.pop(k) for k in list(kw) if k in LifecycleConfig.__dataclass_fields__})
    return BrokerLifecycle(1, uuid.uuid4(), cfg, cluster_id="c", features={"metadata.version": (1, 25)}, **kw)


def running(now=0, **kw):
    b = broker(**kw)
    assert isinstance(b.poll(now), RegistrationRequest)
    b.on_registration_response(0, 7, now)
    b.poll(now)
    b.on_heartbeat_response(HeartbeatReply(0, True, True), now)  # caught up
    b.set_ready_to_unfence(now)
    assert b.poll(now + 10).want_fence is False
    b.on_heartbeat_response(HeartbeatReply(0, True, False), now + 10)  # unfenced
    assert b.state == lm.RUNNING and b.unfenced
    return b


def test_registers_then_heartbeats_through_the_states():
    b = broker()
    req = b.poll(0)
    assert isinstance(req, RegistrationRequest) and req.broker_id == 1 and req.cluster_id == "c"
    assert b.poll(0) is None  # one in flight
    b.on_registration_response(0, 7, 5)
    hb = b.poll(5)  # the first heartbeat at once
    assert hb == HeartbeatRequest(1, 7, -1, want_fence=True, want_shut_down=False)
    b.on_heartbeat_response(HeartbeatReply(0, False, True), 6)
    assert b.state == lm.STARTING and not b.caught_up
    assert b.poll(15) is None and b.next_deadline() == 16  # 10 ms while STARTING
    b.on_metadata_offset(40)
    assert b.poll(16).current_metadata_offset == 40
    b.on_heartbeat_response(HeartbeatReply(0, True, True), 17)
    assert b.state == lm.RECOVERY and b.caught_up
    b.poll(27)
    b.on_heartbeat_response(HeartbeatReply(0, True, True), 28)  # still fenced: wants fencing
    assert b.state == lm.RECOVERY and b.next_deadline() == 28 + 2000
    b.set_ready_to_unfence(30)
    assert b.poll(30).want_fence is False  # at once, not at the interval
    b.on_heartbeat_response(HeartbeatReply(0, True, False), 31)
    assert b.state == lm.RUNNING and b.unfenced
    assert b.poll(31 + 1999) is None and b.poll(31 + 2000) is not None


def test_a_communication_due_while_one_is_in_flight_goes_out_on_the_answer():
    b = running()
    b.poll(3000)
    b.begin_controlled_shutdown(3001)  # in flight: goes out on the answer
    b.on_heartbeat_response(HeartbeatReply(0, True, False), 3002)
    assert b.poll(3002).want_shut_down


def test_errors_back_off_exponentially_up_to_the_session_timeout():
    b = broker()
    delays = []
    now = 0
    for _ in range(9):
        assert b.poll(now) is not None
        b.on_registration_response(int(ErrorCode.not_controller), -1, now)
        delays.append(b.next_deadline() - now)
        now = b.next_deadline()
    assert delays == [100, 200, 400, 800, 1600, 3200, 6400, 9000, 9000]
    b.poll(now)
    b.on_registration_response(0, 3, now)
    b.poll(now)
    b.on_heartbeat_response(HeartbeatReply(STALE), now)
    assert b.next_deadline() == now + 100  # a success reset the count


def test_a_request_without_answer_fails_after_the_request_timeout():
    b = broker(request_timeout_ms=500)
    b.poll(0)
    assert b.next_deadline() == 500
    assert b.poll(499) is None
    assert b.poll(500) is None and b.next_deadline() == 600  # failed, backoff 100 ms
    b.on_registration_response(0, 9, 550)  # a late answer is ignored
    assert not b.registered
    assert isinstance(b.poll(600), RegistrationRequest)


def test_gives_up_when_it_cannot_register_in_time():
    b = broker(initial_registration_timeout_ms=1000)
    b.poll(0)
    b.on_request_failed(10)
    assert b.next_deadline() == 110
    assert b.poll(1000) is None and b.state == lm.SHUTTING_DOWN
    assert b.shutdown_reason == "unable to register with the controller quorum"


def test_controlled_shutdown_waits_for_the_controller():
    b = running()
    b.begin_controlled_shutdown(100)
    assert b.state == lm.PENDING_CONTROLLED_SHUTDOWN and not b.shutdown_finished
    assert b.poll(100).want_shut_down
    b.on_heartbeat_response(HeartbeatReply(0, True, False, False, True), 101)
    assert b.next_deadline() == 151  # the second one sooner
    b.poll(151)
    b.on_heartbeat_response(HeartbeatReply(0, True, False, False, True), 152)
    assert b.next_deadline() == 2152
    b.poll(2152)
    b.on_heartbeat_response(HeartbeatReply(0, True, True, True), 2153)
    assert b.shutdown_finished and b.poll(2200) is None
    assert b.shutdown_reason == "the controller let the broker shut down"


def test_controlled_shutdown_is_bounded():
    b = running(controlled_shutdown_timeout_ms=5000)
    b.begin_controlled_shutdown(100)
    b.poll(100)
    b.on_request_failed(101)
    assert b.next_deadline() <= 5100
    b.poll(5100)
    assert b.shutdown_finished and "timed out" in b.shutdown_reason


def test_no_controlled_shutdown_when_disabled_or_not_running():
    b = running(controlled_shutdown_enable=False)
    b.begin_controlled_shutdown(100)
    assert b.shutdown_finished and b.shutdown_reason == "controlled.shutdown.enable is false"
    b = broker()
    b.begin_controlled_shutdown(0)
    assert b.shutdown_finished


def test_against_cluster_control_until_unfenced_and_let_go():
    """The two halves together: register, catch up, unfence, controlled shutdown."""
    image = MetadataImage()
    image.features = {"metadata.version": 25}
    ctl = ClusterControl(None, lambda: image, "c")
    ctl.activate(0)
    log: list[dict] = []
    b = broker()
    now = 0
    for _ in range(200):
        req = b.poll(now)
        if req is not None:
            try:
                if isinstance(req, RegistrationRequest):
                    records, epoch = ctl.register(req, now, len(log))
                else:
                    records, reply = ctl.heartbeat(req, now, len(log))
            except KafkaError as e:
                records, epoch, reply = [], -1, HeartbeatReply(int(e.code))
            for rec in records:
                image.replay(rec, Delta())
                log.append(rec)
            b.on_metadata_offset(len(log) - 1)
            if isinstance(req, RegistrationRequest):
                b.on_registration_response(0, epoch, now)
            else:
                b.on_heartbeat_response(reply, now)
        if b.state == lm.RECOVERY and not b.ready_to_unfence:
            b.set_ready_to_unfence(now)
        if b.state == lm.RUNNING and now > 10_000:
            b.begin_controlled_shutdown(now)
        if b.shutdown_finished:
            break
        now = b.next_deadline()
    assert b.shutdown_finished and b.shutdown_reason == "the controller let the broker shut down"
    assert image.brokers[1].fenced and [r["type"] for r in log] == [
        "RegisterBrokerRecord",
        "BrokerRegistrationChangeRecord",
        "BrokerRegistrationChangeRecord",
    ]


def test_a_failure_is_never_followed_by_an_immediate_retry():
    b = running()
    b.poll(3000)
    b.begin_controlled_shutdown(3001)  # due while in flight
    b.on_request_failed(3002)
    assert b.poll(3002) is None and b.next_deadline() == 3102
    assert b.poll(3102).want_shut_down
    b.on_heartbeat_response(HeartbeatReply(0, True, False, False, True), 3103)
    assert b.next_deadline() == 3153  # the failure cleared what was due
