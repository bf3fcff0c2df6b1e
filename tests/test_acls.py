"""ACLs (issue 27): stored in the metadata log as AccessControlEntryRecord and
RemoveAccessControlEntryRecord, validated and written by the controller as Kafka's
AclControlManager, replayed into the image, its snapshots and every broker's StandardAuthorizer;
CreateAcls, DescribeAcls and DeleteAcls; the authorizer configs."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time
import uuid

import pytest

from acl_requests import (
    admin_requests,
    consumer_group_describe,
    consumer_group_join,
    delete_groups,
    find_coordinator,
    group_requests,
    init_producer_id,
    offset_fetch,
    txn_requests,
    write_txn_markers,
)
from acl_wire import BoundWireClient, acl, create_acls, delete_acls, describe_acls, described
from kesque.clock import ManualClock
from kesque.config.broker import STANDARD_AUTHORIZER, BrokerConfig
from kesque.config.types import ConfigError
from kesque.controller.controller import Controller
from kesque.errors import ErrorCode
from kesque.metadata import records as mr
from kesque.metadata.image import Delta, MetadataImage
from kesque.metadata.log import MetadataLog
from kesque.metadata.snapshot import image_records
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kesque.security.authorizer import StandardAcl, StandardAuthorizer
from kesque.security.principal import ANONYMOUS
from kesque.testing.broker import Broker
from kesque.testing.cluster import Cluster
from kesque.testing.kafka import free_port
from test_sasl import SCRAM_JAAS, scram_login
from wire import Api, Msg, WireClient

INVALID_REQUEST = int(ErrorCode.invalid_request)
AUTHZ = {"authorizer.class.name": STANDARD_AUTHORIZER}


def binding(rtype, name, op, perm="ALLOW", principal="User:alice", host="*", pattern="LITERAL") -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType[rtype], name, PatternType[pattern]),
        AccessControlEntry(principal, host, AclOperation[op], AclPermissionType[perm]),
    )


class Node:
    """A controller over a real metadata log, restartable (the log is replayed into a new image)."""

    def __init__(self, path):
        self.path = str(path)
        self.clock = ManualClock()
        self.published: list[Delta] = []
        self._open()

    def _open(self):
        self.mlog = MetadataLog(self.path, self.clock)
        self.image = MetadataImage()
        self.mlog.replay_all(self.image)
        self.controller = Controller(BrokerConfig({}), self.image, self.mlog, self.clock, self.published.append)

    def restart(self):
        self.mlog.close()
        self._open()
        return self


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "meta")
    yield n
    n.mlog.close()


# ---------------------------------------------------------------------------- records


def test_acl_records_are_kafkas_types_and_round_trip():
    assert mr.SCHEMAS["AccessControlEntryRecord"][:2] == (18, 0)
    assert mr.SCHEMAS["RemoveAccessControlEntryRecord"][:2] == (19, 0)
    rec = {
        "type": "AccessControlEntryRecord",
        "id": uuid.uuid4(),
        "resource_type": 2,
        "resource_name": "t",
        "pattern_type": 4,
        "principal": "User:alice",
        "host": "*",
        "operation": 4,
        "permission_type": 3,
    }
    assert mr.decode(mr.encode(rec)) == rec
    assert mr.decode(mr.encode({"type": "RemoveAccessControlEntryRecord", "id": rec["id"]}))["id"] == rec["id"]


def test_replay_adds_and_removes_by_id_and_the_delta_says_which():
    image, delta = MetadataImage(), Delta()
    a, b = uuid.uuid4(), uuid.uuid4()
    acl_a = StandardAcl.from_binding(binding("TOPIC", "t", "READ"))
    acl_b = StandardAcl.from_binding(binding("GROUP", "g", "READ"))
    from kesque.metadata.snapshot import acl_record

    image.replay(acl_record(a, acl_a), delta)
    image.replay(acl_record(b, acl_b), delta)
    image.replay({"type": "RemoveAccessControlEntryRecord", "id": b}, delta)
    assert image.acls == {a: acl_a} and image.acl_ids == {acl_a: a}
    assert delta.changed_acls == {a: acl_a}  # b came and went within the batch
    later = Delta()
    image.replay({"type": "RemoveAccessControlEntryRecord", "id": a}, later)
    image.replay({"type": "RemoveAccessControlEntryRecord", "id": uuid.uuid4()}, later)  # unknown: logged
    assert image.acls == {} and later.changed_acls == {a: None} and later


def test_snapshot_holds_the_acls():
    image, delta = MetadataImage(), Delta()
    from kesque.metadata.snapshot import acl_record

    acls = {uuid.uuid4(): StandardAcl.from_binding(binding("TOPIC", f"t{i}", "WRITE")) for i in range(5)}
    for acl_id, a in acls.items():
        image.replay(acl_record(acl_id, a), delta)
    rebuilt = MetadataImage()
    for rec in image_records(image):
        rebuilt.replay(mr.decode(mr.encode(rec)), Delta())
    assert rebuilt.acls == acls


# ---------------------------------------------------------------------------- controller


def test_controller_creates_acls_with_fresh_ids_once_each(node):
    c = node.controller
    b1, b2 = binding("TOPIC", "t", "READ"), binding("TOPIC", "pre", "WRITE", pattern="PREFIXED")
    assert c.create_acls([b1, b2, b1]) == [None, None, None]
    assert sorted(a.to_binding().pattern.name for a in node.image.acls.values()) == ["pre", "t"]
    assert len(set(node.image.acls)) == 2
    before = dict(node.image.acls)
    assert c.create_acls([b1]) == [None]  # already there: success, nothing written
    assert node.image.acls == before
    # the records are in the log: a restart replays the same ACLs, ids and all
    assert node.restart().image.acls == before


@pytest.mark.parametrize(
    "bad, message",
    [
        (binding("CLUSTER", "c", "ALTER"), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (binding("TOPIC", "", "READ"), "Invalid empty resource name"),
        (binding("ANY", "t", "READ"), "Invalid resourceType ANY"),
        (binding("TOPIC", "t", "READ", pattern="MATCH"), "Invalid patternType MATCH"),
        (binding("TOPIC", "t", "ANY"), "Invalid operation ANY"),
        (binding("TOPIC", "t", "READ", perm="ANY"), "Invalid permissionType ANY"),
    ],
)
def test_controller_refuses_an_invalid_acl_and_stores_the_others(node, bad, message):
    results = node.controller.create_acls([bad, binding("TOPIC", "ok", "READ")])
    assert results[0].code == INVALID_REQUEST and results[0].message == message
    assert results[1] is None
    assert [a.resource_name for a in node.image.acls.values()] == ["ok"]


def test_controller_deletes_what_each_filter_matches(node):
    c = node.controller
    c.create_acls([binding("TOPIC", "t", "READ"), binding("TOPIC", "t", "WRITE"), binding("GROUP", "g", "READ")])
    topic_t = AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "t", PatternType.LITERAL))
    reads = AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=AclOperation.READ))
    unknown = AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN))
    results = c.delete_acls([topic_t, reads, unknown])
    assert sorted(b.entry.operation.name for b in results[0][0]) == ["READ", "WRITE"] and results[0][1] is None
    assert sorted(b.pattern.name for b in results[1][0]) == ["g", "t"]  # t READ matched by both filters
    assert results[2][0] == [] and results[2][1].message == "Unknown patternFilter."
    assert node.image.acls == {}
    assert node.restart().image.acls == {}


# ---------------------------------------------------------------------------- configs


def test_authorizer_configs():
    cfg = BrokerConfig({**AUTHZ, "super.users": "User:admin;User:ops", "allow.everyone.if.no.acl.found": "true"})
    a = StandardAuthorizer.from_config(cfg)
    assert a.super_users == {"User:admin", "User:ops"} and a.allow_everyone_if_no_acl_found
    assert BrokerConfig({}).get("authorizer.class.name") == "" and not BrokerConfig({}).get(
        "allow.everyone.if.no.acl.found"
    )
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    assert e.value.name == "authorizer.class.name"
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"super.users": "admin"})
    assert e.value.name == "super.users"


# ---------------------------------------------------------------------------- one broker

ADMIN_HOST = "127.0.0.2"  # the tests' admin connects from here (see admin_acls)


def admin_acls(host: str = ADMIN_HOST) -> list[dict]:
    """What makes the admin's connections from ``host`` a super user in effect: ALLOW ALL on the
    cluster and on every topic, group and transactional id, from that host only. Created on a
    broker with allow.everyone.if.no.acl.found=true (no ACL anywhere yet: anyone may create
    them); from then on every resource of those types has ACLs, so that setting decides nothing
    any more for them, and a client from another host gets only what its own ACLs give it."""
    return [
        acl("CLUSTER", "kafka-cluster", "ALL", host=host),
        *(acl(t, "*", "ALL", host=host) for t in ("TOPIC", "GROUP", "TRANSACTIONAL_ID")),
    ]


def test_acl_apis_on_a_broker_without_an_authorizer_answer_security_disabled(tmp_path):
    with Broker(data_dir=str(tmp_path / "d"), mode="thread").start() as b, WireClient(b.bootstrap_servers) as c:
        assert describe_acls(c).error_code == ErrorCode.security_disabled
        r = create_acls(c, [acl("TOPIC", "t", "READ")])
        assert [x.error_code for x in r.results] == [ErrorCode.security_disabled]
        r = delete_acls(c, [{}])
        assert [x.error_code for x in r.filter_results] == [ErrorCode.security_disabled]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    cfg = {**AUTHZ, "allow.everyone.if.no.acl.found": "true"}
    b = Broker(data_dir=str(tmp_path_factory.mktemp("acls") / "d"), mode="thread", config=cfg).start()
    try:
        with BoundWireClient(b.bootstrap_servers, ADMIN_HOST) as admin:
            r = create_acls(admin, admin_acls())
            assert [x.error_code for x in r.results] == [0] * 4
            Api(admin).create_topic("t")
        yield b
    finally:
        b.stop()


def test_acl_apis_create_describe_delete(secured):
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:
        r = create_acls(
            admin,
            [
                acl("TOPIC", "t", "READ", principal="User:alice"),
                acl("TOPIC", "t", "READ", principal="User:alice"),
                acl("TOPIC", "x", "READ", pattern="PREFIXED", principal="User:bob", perm="DENY"),
                acl("CLUSTER", "other", "ALTER"),
            ],
        )
        assert [x.error_code for x in r.results] == [0, 0, 0, INVALID_REQUEST]
        assert r.results[3].error_message == "The only valid name for the CLUSTER resource is kafka-cluster"
        mine = described(describe_acls(admin, principal="User:alice")) | described(
            describe_acls(admin, principal="User:bob")
        )
        assert mine == {
            ("TOPIC", "t", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            ("TOPIC", "x", "PREFIXED", "User:bob", "*", "READ", "DENY"),
        }
        # MATCH: the ACLs that apply to topic "xyz" (the prefix "x" and the admin's wildcard)
        assert {a[1] for a in described(describe_acls(admin, rtype="TOPIC", name="xyz", pattern="MATCH"))} == {
            "x",
            "*",
        }
        r = delete_acls(admin, [{"principal": "User:alice"}, {"principal": "User:bob"}])
        assert [len(f.matching_acls) for f in r.filter_results] == [1, 1]
        assert described(describe_acls(admin, principal="User:alice")) == set()
    # a filter with an UNKNOWN (0) code does not parse (as Kafka's request classes): the
    # connection is closed
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:
        admin.send(*_unknown_describe())
        assert admin.is_closed()


def _unknown_describe():
    from kesque.protocol.api_keys import ApiKeys
    from wire import Msg

    m = Msg(ApiKeys.DESCRIBE_ACLS, 3)
    req = m(
        resource_type_filter=0,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    return ApiKeys.DESCRIBE_ACLS, 3, req


def test_only_alter_on_the_cluster_manages_acls(secured):
    with WireClient(secured.bootstrap_servers) as c:  # 127.0.0.1: no ACL for this host
        r = create_acls(c, [acl("TOPIC", "t", "READ")])
        assert [x.error_code for x in r.results] == [ErrorCode.cluster_authorization_failed]
        assert describe_acls(c).error_code == ErrorCode.cluster_authorization_failed
        r = delete_acls(c, [{}])
        assert [x.error_code for x in r.filter_results] == [ErrorCode.cluster_authorization_failed]


def test_a_revoked_acl_stops_the_next_request_on_an_open_connection(secured):
    batch = build_batch([(None, b"v", ())])
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin, WireClient(secured.bootstrap_servers) as c:
        assert Api(c).produce("t", batch).error_code == ErrorCode.topic_authorization_failed
        assert [x.error_code for x in create_acls(admin, [acl("TOPIC", "t", "WRITE", host="127.0.0.1")]).results] == [0]
        assert _eventually(lambda: Api(c).produce("t", batch).error_code == 0)
        r = delete_acls(admin, [{"rtype": "TOPIC", "name": "t", "pattern": "LITERAL", "host": "127.0.0.1"}])
        assert len(r.filter_results[0].matching_acls) == 1
        assert _eventually(lambda: Api(c).produce("t", batch).error_code == ErrorCode.topic_authorization_failed)


def _eventually(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_the_broker_authorizer_follows_the_image(secured):
    a = secured._server.authorizer
    assert isinstance(a, StandardAuthorizer) and a.loading_complete
    assert a.acl_count() == len(secured._server.image.acls) >= 4
    assert a.authorize_action(ANONYMOUS, ADMIN_HOST, AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    assert not a.authorize_action(ANONYMOUS, "127.0.0.1", AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")


# ---------------------------------------------------------------------------- a cluster


def test_acls_and_scram_users_reach_every_broker_of_a_cluster_and_survive_restarts(tmp_path):
    # the nodes reach each other's controller listeners as User:ANONYMOUS (PLAINTEXT), and a
    # controller takes the raft RPCs, registrations and Envelopes only with CLUSTER_ACTION,
    # which a StandardAuthorizer grants nobody but super users before it has loaded the ACLs
    # from the metadata log that those RPCs elect a leader for: as Kafka (KIP-801), a cluster
    # with an authorizer has its nodes' principal in super.users
    cfg = {**AUTHZ, "allow.everyone.if.no.acl.found": "true", "super.users": "User:ANONYMOUS"}
    cluster = Cluster(3, data_dir=str(tmp_path / "c"), config=cfg)
    last = cluster.brokers[-1]  # the node restarted below: a SCRAM user logs in there after it
    sasl_port = free_port()
    last.config["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    last.config["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
    last.config["sasl.enabled.mechanisms"] = "SCRAM-SHA-256"
    last.config["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"] = SCRAM_JAAS
    cluster.start()
    try:
        first = cluster.brokers[0]
        with BoundWireClient(first.bootstrap_servers, ADMIN_HOST) as admin:
            r = create_acls(admin, [*admin_acls(), acl("GROUP", "g", "READ", principal="User:carol")])
            assert [x.error_code for x in r.results] == [0] * 5

        def seen_by(b) -> set:
            with BoundWireClient(b.bootstrap_servers, ADMIN_HOST) as c:
                return described(describe_acls(c))

        # CreateAcls answers once the controller committed the records; each broker (this one
        # too) applies them from the metadata log a moment later, as in Kafka
        assert _eventually(lambda: len(seen_by(first)) == 5)
        want = seen_by(first)

        # a SCRAM user, made through the first broker, reaches every broker's image too
        salted = hashlib.pbkdf2_hmac("sha256", b"erin-secret", SALT, 4096)
        with BoundWireClient(first.bootstrap_servers, ADMIN_HOST) as admin:
            assert alter_scram(admin, "erin", salted) == [0]
        for b in cluster.brokers:
            assert _eventually(lambda b=b: seen_by(b) == want), b
            assert _eventually(lambda b=b: scram_users(b) == ["erin"]), b
        # a broker restarts: the ACLs and the SCRAM user come back from its metadata log (and its
        # snapshot), and the user logs in there
        cluster.restart(cluster.specs[-1].node_id)
        assert _eventually(lambda: seen_by(last) == want)
        assert scram_users(last) == ["erin"]
        with WireClient(f"127.0.0.1:{sasl_port}") as c:
            assert scram_login(c, "SCRAM-SHA-256", "erin", "erin-secret").error_code == ErrorCode.none
        with BoundWireClient(cluster.brokers[1].bootstrap_servers, ADMIN_HOST) as admin:
            r = delete_acls(admin, [{"principal": "User:carol"}])
            assert len(r.filter_results[0].matching_acls) == 1
        for b in cluster.brokers:
            assert _eventually(lambda b=b: len(seen_by(b)) == 4), b
    finally:  # killed: a clean stop of the whole cluster takes half a minute and is not tested here
        for spec in cluster.specs:
            if cluster.node(spec.node_id).process is not None:
                cluster.kill(spec.node_id)
        cluster.close()


def test_a_controller_whose_acls_are_not_loaded_answers_unknown_server_error(tmp_path):
    """Before its StandardAuthorizer has loaded the ACLs from the metadata log (here: one voter
    of three up, no quorum, the log never caught up) a controller listener serves only super
    users; anyone else's request gets Kafka's error response with UNKNOWN_SERVER_ERROR (its
    AuthorizerNotReadyException has no code of its own), the connection open for the next one."""
    cluster = Cluster(3, controllers=3, data_dir=str(tmp_path / "c"), config=AUTHZ)
    lone = cluster.node(1)
    lone.launch()
    try:
        controller = ("127.0.0.1", cluster.specs[0].controller_port)
        assert _eventually(lambda: _connects(controller), 30)
        hb = Msg(ApiKeys.BROKER_HEARTBEAT, 1)(
            broker_id=2, broker_epoch=0, current_metadata_offset=0, want_fence=False, want_shut_down=False
        )
        with WireClient(f"{controller[0]}:{controller[1]}") as c:
            assert c.request(ApiKeys.BROKER_HEARTBEAT, 1, hb).error_code == ErrorCode.unknown_server_error
            fetched = Api(c).fetch("t", 0)  # v12: the error at the top and on each partition
            assert fetched.error_code == ErrorCode.unknown_server_error
            assert [p.error_code for t in fetched.responses for p in t.partitions] == [ErrorCode.unknown_server_error]
            assert c.request(ApiKeys.BROKER_HEARTBEAT, 1, hb).error_code == ErrorCode.unknown_server_error
    finally:
        lone.kill()
        cluster.close()


SALT = b"erin-salt-16-byte"


def alter_scram(c, user: str, salted: bytes) -> list[int]:
    """AlterUserScramCredentials: ``user`` with a SCRAM-SHA-256 credential (salt ``SALT``)."""
    m = Msg(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0)
    up = m("ScramCredentialUpsertion", name=user, mechanism=1, iterations=4096, salt=SALT, salted_password=salted)
    r = c.request(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0, m(deletions=(), upsertions=(up,)))
    return [int(x.error_code) for x in r.results]


def scram_users(b) -> list[str]:
    """The users DescribeUserScramCredentials lists on broker ``b``."""
    with BoundWireClient(b.bootstrap_servers, ADMIN_HOST) as c:
        r = c.request(
            ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, Msg(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)(users=None)
        )
        return sorted(x.user for x in r.results)


def _connects(address) -> bool:
    try:
        socket.create_connection(address, 1).close()
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------- groups, offsets, transactions

GROUP_REFUSED = {
    "find_group": 30,
    "find_group_v3": 30,
    "join": 30,
    "sync": 30,
    "heartbeat": 30,
    "leave": 30,
    "commit": {"t": [30], "t-missing": [30]},
    "fetch": {"group": 30},
    "fetch_all": {"group": 30},
    "offset_delete": {"group": 30},
    "describe": (30, -2147483648),
    "listed": [],
    "cg_heartbeat": (30, 0),
}
TXN_REFUSED = {
    "find_txn": 53,
    "init_txn": 53,
    "init_idempotent": 31,
    "add_partitions": {"t": [53]},
    "add_offsets": 53,
    "txn_commit": {"t": [53]},
    "end_txn": 53,
    "describe_txn": 53,
    "listed_txn": [],
}


def _client_acls(secured, acls):
    """Give 127.0.0.1 ``acls`` (and wait until the broker applies them)."""
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:
        before = len(described(describe_acls(admin, host="127.0.0.1")))
        assert [r.error_code for r in create_acls(admin, acls).results] == [0] * len(acls)
        assert _eventually(lambda: len(described(describe_acls(admin, host="127.0.0.1"))) == before + len(acls))


def _drop_client_acls(secured):
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:
        delete_acls(admin, [{"host": "127.0.0.1"}])
        assert _eventually(lambda: not described(describe_acls(admin, host="127.0.0.1")))


def test_a_described_group_leaves_out_a_deleted_topic_and_is_not_refused_for_it(secured):
    """ConsumerGroupDescribe shows a member's assignment of the topics the image still has, as
    Kafka's (a deleted topic's partitions are left out): the describe's topic check never asks
    about a topic without a name, so a caller with DESCRIBE on the group and on no topic sees
    the group whose only topic was deleted."""
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:
        assert Api(admin).create_topic("gone").error_code == 0
        assert _eventually(lambda: Api(admin).metadata(["gone"]).topics[0].error_code == 0)
        assert _eventually(lambda: find_coordinator(admin, 0, "cg-gone") == 0)  # __consumer_offsets made
        consumer_group_join(admin, "cg-gone", "gone")
        assert consumer_group_describe(admin, "cg-gone") == (0, None, ["gone"])
        m = Msg(ApiKeys.DELETE_TOPICS, 6)
        req = m(topics=(m("DeleteTopicState", name="gone", topic_id=None),), timeout=10000)
        assert admin.request(ApiKeys.DELETE_TOPICS, 6, req).responses[0].error_code == 0
    _client_acls(secured, [acl("GROUP", "cg-gone", "DESCRIBE", host="127.0.0.1")])
    try:
        with WireClient(secured.bootstrap_servers) as c:
            assert _eventually(lambda: consumer_group_describe(c, "cg-gone") == (0, None, []))
    finally:
        _drop_client_acls(secured)


def test_group_and_transaction_apis_refuse_what_the_acls_do_not_allow(secured):
    with BoundWireClient(secured.bootstrap_servers, ADMIN_HOST) as admin:  # the group exists (listed)
        group_requests(admin, "g", "t")
    with WireClient(secured.bootstrap_servers) as c:
        assert group_requests(c, "g", "t") == GROUP_REFUSED
        assert txn_requests(c, "x", "g", "t") == TXN_REFUSED
        assert write_txn_markers(c, "t") == [31]


def test_group_and_transaction_apis_with_the_acls_they_need(secured):
    h = "127.0.0.1"
    _client_acls(
        secured,
        [
            acl("GROUP", "g", "READ", host=h),
            acl("GROUP", "g-848", "READ", host=h),
            acl("TOPIC", "t", "READ", host=h),
            acl("TRANSACTIONAL_ID", "x", "WRITE", host=h),
        ],
    )
    try:
        with WireClient(secured.bootstrap_servers) as c:
            got = group_requests(c, "g", "t")
            assert got["find_group"] == got["find_group_v3"] == 0
            assert got["join"] not in (30, 29) and got["heartbeat"] == 25  # UNKNOWN_MEMBER_ID
            assert got["commit"] == {"t": [0], "t-missing": [29]}
            assert got["fetch"] == {"group": 0, "t": [0], "t-missing": [29]}
            assert got["offset_delete"] == {"group": 30}  # DELETE on the group is not given
            assert got["describe"] == (0, (1 << 3) | (1 << 8))  # READ and the DESCRIBE it implies
            assert got["listed"] == ["g"] and got["cg_heartbeat"] == (0, None)
            assert delete_groups(c, "g") == 30
            txn = txn_requests(c, "x", "g", "t")
            assert txn["find_txn"] == 0 and txn["init_txn"] == 0 and txn["end_txn"] not in (53, 29)
            assert txn["init_idempotent"] == 31  # neither IDEMPOTENT_WRITE nor WRITE on a topic
            assert txn["add_partitions"] == {"t": [29]}  # WRITE on the topic is missing
            assert txn["describe_txn"] == 0 and txn["listed_txn"] == ["x"]  # WRITE implies DESCRIBE
        _client_acls(secured, [acl("TOPIC", "other-", "WRITE", host=h, pattern="PREFIXED")])
    except AssertionError:
        _drop_client_acls(secured)
        raise
    with WireClient(secured.bootstrap_servers) as c:
        try:
            # WRITE on some topic is enough for an idempotent producer's id (KIP-679)
            assert init_producer_id(c, None) == 0
            fetched = offset_fetch(c, "g", None)
            assert fetched == {"group": 0, "t": [0]}
        finally:
            _drop_client_acls(secured)


def test_the_remaining_apis_refuse_what_the_acls_do_not_allow(secured):
    with WireClient(secured.bootstrap_servers) as c:
        assert admin_requests(c, "t") == {
            "list_offsets": [29],
            "offset_for_leader_epoch": [29],  # neither CLUSTER_ACTION nor DESCRIBE on the topic
            "delete_records": [29],
            "describe_log_dirs": 31,
            "alter_replica_log_dirs": [31],
            "elect_leaders": (31, [31]),
            "alter_reassignments": (31, [31]),
            "list_reassignments": 31,
            "describe_producers": [29],
        }
    _client_acls(secured, [acl("TOPIC", "t", "DESCRIBE", host="127.0.0.1")])
    try:
        with WireClient(secured.bootstrap_servers) as c:
            got = admin_requests(c, "t")
            assert got["list_offsets"] == [0] and got["offset_for_leader_epoch"] == [0]
            assert got["delete_records"] == [29] and got["describe_producers"] == [29]  # DELETE, READ
    finally:
        _drop_client_acls(secured)


# ---------------------------------------------------------------------------- kesque acls


def test_kesque_acls_adds_lists_and_removes(tmp_path):
    cfg = {**AUTHZ, "allow.everyone.if.no.acl.found": "true"}
    with Broker(data_dir=str(tmp_path / "d"), mode="thread", config=cfg).start() as b:

        def tool(*args):
            argv = [sys.executable, "-m", "kesque", "acls", "--bootstrap-server", b.bootstrap_servers, *args]
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)

        r = tool("--add", "--allow-principal", "User:ANONYMOUS", "--operation", "All", "--cluster")
        assert r.returncode == 0, r.stderr
        r = tool("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "t", "--group", "g")
        assert r.returncode == 0 and r.stdout.count("Adding ACLs for resource") == 2
        r = tool("--list", "--topic", "t")
        assert r.stdout == (
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n"
            "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
            "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n"
        )
        assert tool("--remove", "--force", "--topic", "t").returncode == 0
        assert tool("--list", "--topic", "t").stdout == ""
        assert "`User:alice`" in tool("--list", "--principal", "User:alice").stdout
        r = tool("--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g")
        assert r.returncode == 1 and r.stderr.startswith("ResourceType GROUP only supports operations [")
