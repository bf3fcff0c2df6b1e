"""Kafka's Envelope (issue 27): a broker forwards its clients' admin requests to the active
controller in an EnvelopeRequest with their principal and address, and the controller checks
them with those (kesque/server/envelope.py); the controller listener trusts nobody by listener
alone. On PLAINTEXT everyone is User:ANONYMOUS, so the tests tell clients apart by host, as the
ACL tests do: the nodes reach each other from 127.0.0.1 and hold CLUSTER_ACTION there (what a
Kafka cluster with an authorizer needs), the admin connects from 127.0.0.2, a plain client from
127.0.0.3."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest

from acl_wire import BoundWireClient, acl, create_acls
from kesque.config.broker import STANDARD_AUTHORIZER
from kesque.errors import ErrorCode
from kesque.protocol.api import RequestHeader, request_class
from kesque.protocol.api_keys import ApiKeys
from kesque.security.principal import ANONYMOUS, KafkaPrincipal
from kesque.server import envelope
from kesque.testing.cluster import Cluster
from wire import Api, Msg

NODES, ADMIN, CLIENT = "127.0.0.1", "127.0.0.2", "127.0.0.3"


# ---------------------------------------------------------------------------- the codec
def test_the_principal_is_serialized_as_kafkas_default_principal_builder():
    """MessageUtil.toVersionPrefixedBytes(0, DefaultPrincipalData): int16 version, then the
    flexible v0 struct: compact strings type and name, the token flag, no tagged fields."""
    raw = envelope.serialize_principal(KafkaPrincipal("User", "alice"))
    assert raw == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x00" + b"\x00"
    assert envelope.deserialize_principal(raw) == KafkaPrincipal("User", "alice")
    assert envelope.deserialize_principal(envelope.serialize_principal(ANONYMOUS)) == ANONYMOUS
    for bad in (b"", b"\x00\x01\x05User\x06alice\x00\x00", b"\x00\x00\x05Us"):
        with pytest.raises(ValueError):
            envelope.deserialize_principal(bad)


def test_the_client_address_is_in_network_byte_order():
    assert envelope.client_address_bytes("10.1.2.3") == bytes([10, 1, 2, 3])
    assert envelope.parse_client_address(envelope.client_address_bytes("::1")) == "::1"
    assert envelope.parse_client_address(envelope.client_address_bytes("::ffff:10.0.0.7")) == "10.0.0.7"
    with pytest.raises(envelope.EnvelopeError) as e:
        envelope.parse_client_address(b"\x01\x02")
    assert e.value.code == ErrorCode.invalid_request


def _create_topics(name: str):
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    topic = m("CreatableTopic", name=name, num_partitions=1, replication_factor=1, assignments=(), configs=())
    return m(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)


def _envelope(name: str, host: str, principal=ANONYMOUS, inner_key=ApiKeys.CREATE_TOPICS):
    header = RequestHeader(inner_key, 7, 99, "forwarded-client", 0, True)
    return envelope.envelope_request(header, _create_topics(name), principal, host)


def test_an_envelope_in_an_envelope_and_an_unparsable_header_are_refused():
    nested = RequestHeader(ApiKeys.ENVELOPE, 0, 1, "b", 0, True)
    data = envelope.encode_inner_request(nested, _envelope("t", CLIENT))
    with pytest.raises(envelope.EnvelopeError) as e:
        envelope.parse_inner(data)
    assert e.value.code == ErrorCode.invalid_request
    with pytest.raises(envelope.EnvelopeError) as e:
        envelope.parse_inner(b"\x00\x13")
    assert e.value.code == ErrorCode.unsupported_version


# ---------------------------------------------------------------------------- on a cluster
def _eventually(check, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One controller-only node (1) and two brokers (2, 3): every admin request of the brokers'
    clients goes to the controller in an Envelope."""
    cfg = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    c = Cluster(2, controllers=1, data_dir=str(tmp_path_factory.mktemp("envelope")), config=cfg).start()
    try:
        with BoundWireClient(c.brokers[0].bootstrap_servers, ADMIN) as admin:
            r = create_acls(
                admin,
                [
                    acl("CLUSTER", "kafka-cluster", "ALL", host=ADMIN),
                    acl("TOPIC", "*", "ALL", host=ADMIN),
                    acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION", host=NODES),
                ],
            )
            assert [x.error_code for x in r.results] == [0, 0, 0]
        yield c
    finally:
        for spec in c.specs:
            if c.node(spec.node_id).process is not None:
                c.kill(spec.node_id)
        c.close()


def _controller(c) -> tuple[str, int]:
    return ("127.0.0.1", c.specs[0].controller_port)


def _create(client, name: str):
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    return client.request(ApiKeys.CREATE_TOPICS, 7, _create_topics(name)).topics[0], m


def test_a_forwarded_create_topics_is_checked_by_the_controller_with_the_clients_principal(cluster):
    """The broker checks nothing (Kafka's forwardToController): the client from 127.0.0.3 has no
    CREATE, the controller refuses it through the Envelope; the admin's goes through."""
    with BoundWireClient(cluster.brokers[0].bootstrap_servers, CLIENT) as client:
        topic, _ = _create(client, "refused")
        assert topic.error_code == ErrorCode.topic_authorization_failed
    with BoundWireClient(cluster.brokers[0].bootstrap_servers, ADMIN) as admin:
        topic, _ = _create(admin, "made-by-admin")
        assert topic.error_code == ErrorCode.none, topic


def test_an_envelope_from_a_principal_without_cluster_action_is_refused(cluster):
    with BoundWireClient(_controller(cluster), CLIENT) as c:
        r = c.request(ApiKeys.ENVELOPE, 0, _envelope("sneaky", ADMIN))
        assert r.error_code == ErrorCode.cluster_authorization_failed and r.response_data is None


def test_the_controller_runs_an_envelope_as_the_client_it_carries(cluster):
    """From the nodes' host (CLUSTER_ACTION), an Envelope is run with the principal and address
    it carries: the admin's address may create, a plain client's may not."""
    with BoundWireClient(_controller(cluster), NODES) as node:
        refused = node.request(ApiKeys.ENVELOPE, 0, _envelope("as-client", CLIENT))
        assert refused.error_code == ErrorCode.none
        inner = envelope.inner_response(ApiKeys.CREATE_TOPICS, 7, refused.response_data)
        assert [t.error_code for t in inner.topics] == [ErrorCode.topic_authorization_failed]
        assert int.from_bytes(refused.response_data[:4], "big") == 99  # the client's correlation id
        allowed = node.request(ApiKeys.ENVELOPE, 0, _envelope("as-admin", ADMIN))
        inner = envelope.inner_response(ApiKeys.CREATE_TOPICS, 7, allowed.response_data)
        assert [t.error_code for t in inner.topics] == [ErrorCode.none]
        # Kafka's envelope errors: an API that is not forwarded, an envelope inside one,
        # principal bytes that do not read, an address of the wrong length
        body = _envelope("x", ADMIN)
        heartbeat = RequestHeader(ApiKeys.BROKER_HEARTBEAT, 1, 5, "b", 0, True)
        hb = request_class(ApiKeys.BROKER_HEARTBEAT, 1)(
            broker_id=2, broker_epoch=0, current_metadata_offset=0, want_fence=False, want_shut_down=False
        )
        for bad, code in (
            (envelope.envelope_request(heartbeat, hb, ANONYMOUS, ADMIN), ErrorCode.invalid_request),
            (
                type(body)(
                    request_data=envelope.encode_inner_request(
                        RequestHeader(ApiKeys.ENVELOPE, 0, 1, "b", 0, True), body
                    ),
                    request_principal=body.request_principal,
                    client_host_address=body.client_host_address,
                ),
                ErrorCode.invalid_request,
            ),
            (
                type(body)(
                    request_data=body.request_data, request_principal=b"\x00\x07", client_host_address=b"\x7f\0\0\2"
                ),
                ErrorCode.principal_deserialization_failure,
            ),
            (
                type(body)(
                    request_data=body.request_data, request_principal=body.request_principal, client_host_address=b"\1"
                ),
                ErrorCode.invalid_request,
            ),
        ):
            r = node.request(ApiKeys.ENVELOPE, 0, bad)
            assert r.error_code == code and r.response_data is None, (bad, r)


def test_a_client_straight_on_the_controller_listener_is_checked(cluster):
    """No trust by listener: CreateTopics straight to the controller from 127.0.0.3 is refused,
    and the brokers' own RPCs need CLUSTER_ACTION (a heartbeat from that host too)."""
    with BoundWireClient(_controller(cluster), CLIENT) as c:
        topic, _ = _create(c, "direct")
        assert topic.error_code == ErrorCode.topic_authorization_failed
        hb = request_class(ApiKeys.BROKER_HEARTBEAT, 1)(
            broker_id=2, broker_epoch=0, current_metadata_offset=0, want_fence=False, want_shut_down=False
        )
        assert c.request(ApiKeys.BROKER_HEARTBEAT, 1, hb).error_code == ErrorCode.cluster_authorization_failed
    with BoundWireClient(_controller(cluster), ADMIN) as admin:
        topic, _ = _create(admin, "direct-by-admin")
        assert topic.error_code == ErrorCode.none
    # the broker, from 127.0.0.1, still heartbeats: it stays registered and unfenced
    m = Msg(ApiKeys.METADATA, 12)
    meta = m(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with BoundWireClient(cluster.brokers[0].bootstrap_servers, ADMIN) as admin:
        brokers = [b.node_id for b in admin.request(ApiKeys.METADATA, 12, meta).brokers]
    assert sorted(brokers) == [2, 3], brokers


def test_a_forwarded_request_is_throttled_by_the_clients_own_quota(cluster):
    """The controller mutation quota is the forwarded client's (its client id in the Envelope's
    inner header), not the forwarding broker's: a 20-partition topic overdraws client
    "creator"'s 1/s bucket, its next CreateTopics through the broker is refused with the time to
    wait (strict, v7), and another client id is not limited."""
    bs = cluster.brokers[1].bootstrap_servers
    with BoundWireClient(bs, ADMIN) as admin:
        r = Api(admin).alter_client_quotas([({"client-id": "creator"}, {"controller_mutation_rate": 1})])
        assert [e.error_code for e in r.entries] == [0]

    def create(name: str, partitions: int, client_id: str):
        with BoundWireClient(bs, ADMIN, client_id=client_id) as c:  # fresh: a throttled one is muted
            r = Api(c).create_topics([{"name": name, "num_partitions": partitions}])
            return r.topics[0].error_code, r.throttle_time

    # the quota reaches the controller's image a moment after it is committed
    def overdrawn() -> bool:
        n = time.monotonic_ns()
        assert create(f"q-{n}", 20, "creator")[0] == ErrorCode.none  # permissive while the bucket holds
        code, delay = create(f"q-{n}-next", 1, "creator")
        return code == ErrorCode.throttling_quota_exceeded and delay > datetime.timedelta(0)

    assert _eventually(overdrawn)
    assert create("q-other", 50, "someone-else") == (ErrorCode.none, datetime.timedelta(0))


def test_describe_cluster_on_a_controller_needs_alter_on_the_cluster(cluster):
    """ControllerApis.handleDescribeCluster: unlike a broker, a controller answers only a
    principal with ALTER on the cluster (KIP-919's controller endpoints)."""
    m = Msg(ApiKeys.DESCRIBE_CLUSTER, 1)
    req = m(include_cluster_authorized_operations=False, endpoint_type=2)
    with BoundWireClient(_controller(cluster), CLIENT) as c:
        r = c.request(ApiKeys.DESCRIBE_CLUSTER, 1, req)
        assert r.error_code == ErrorCode.cluster_authorization_failed and r.brokers == ()
    with BoundWireClient(_controller(cluster), ADMIN) as admin:
        r = admin.request(ApiKeys.DESCRIBE_CLUSTER, 1, req)
        assert r.error_code == ErrorCode.none and [b.broker_id for b in r.brokers] == [1]


def controller_fetch_answers(controller: tuple[str, int], host: str, topic: str) -> list:
    """A consumer's Fetch (v12 and v16, by name and by a made-up id) on a controller listener
    from ``host``: (top-level error, [partition errors]) of each."""
    out = []
    with BoundWireClient(controller, host) as c:
        api = Api(c)
        r = api.fetch(topic, 0)
        out.append((int(r.error_code), [int(p.error_code) for t in r.responses for p in t.partitions]))
        r = c.request(ApiKeys.FETCH, 16, api.fetch_request(topic, 0, version=16, topic_id=uuid.UUID(int=7)))
        out.append((int(r.error_code), [int(p.error_code) for t in r.responses for p in t.partitions]))
    return out


# Kafka 4.4's answer (tests/test_oracle_acls.py asks its controller listener the same)
CONTROLLER_FETCH_REFUSED = [(31, [31]), (31, [])]


def test_every_fetch_on_a_controller_listener_needs_cluster_action(cluster):
    """ControllerApis.handleFetch checks CLUSTER_ACTION before anything, a consumer's Fetch too:
    Kafka's FetchRequest error response (before v13 the error on each partition)."""
    assert controller_fetch_answers(_controller(cluster), CLIENT, "anything") == CONTROLLER_FETCH_REFUSED
    allowed = controller_fetch_answers(_controller(cluster), ADMIN, "anything")
    assert ErrorCode.cluster_authorization_failed not in [x for code, parts in allowed for x in (code, *parts)]
