"""ACLs against Apache Kafka 4.4 (issue 27): both run Kafka's StandardAuthorizer; for each ACL set
given to User:ANONYMOUS connecting from 127.0.0.1, the same requests get the same error codes
and show the same topics on both: the topic and admin APIs, then the group, offset and
transaction APIs (tests/acl_requests.py).

The admin. On PLAINTEXT every client is User:ANONYMOUS, on both systems, and ``super.users`` is
not a dynamic config in Kafka, so no super user can be told apart by principal. ACLs are per
host, though: the admin connects from 127.0.0.2 and holds ALLOW ALL on the cluster and on every
topic, group and transactional id *from that host only*. Those ACLs are created first, by a
client nobody has refused anything yet: both start with ``allow.everyone.if.no.acl.found=true``
and no ACL. From then on every resource of those four types has an ACL (the wildcard ones), so
``allow.everyone.if.no.acl.found`` decides nothing any more for them: a client from 127.0.0.1
gets exactly what it would get with ``false``, only what its own ACLs give it. Kafka's broker
reaches its controller as User:ANONYMOUS from 127.0.0.1 too and needs CLUSTER_ACTION there (its
heartbeats): that ALLOW is set on both, and shows in the cluster's authorized operations on both.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import acl_requests as rq
import oracle
from acl_wire import BoundWireClient, acl, create_acls, delete_acls, describe_acls, described
from kesque.config.broker import STANDARD_AUTHORIZER
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from test_envelope import CONTROLLER_FETCH_REFUSED, controller_fetch_answers
from wire import Api, Msg, WireClient

pytestmark = oracle.MARKS

ADMIN_HOST, CLIENT_HOST = "127.0.0.2", "127.0.0.1"
CONFIG = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}


def admin_acls() -> list[dict]:
    return [
        acl("CLUSTER", "kafka-cluster", "ALL", host=ADMIN_HOST),
        *(acl(t, "*", "ALL", host=ADMIN_HOST) for t in ("TOPIC", "GROUP", "TRANSACTIONAL_ID")),
        acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION", host=CLIENT_HOST),
    ]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # (share groups are on by default in Kafka 4.4)
    with oracle.brokers(tmp_path_factory, config=CONFIG, kesque_config={"group.share.enable": "true"}) as b:
        for broker in b.values():
            with BoundWireClient(broker.bootstrap_servers, ADMIN_HOST) as admin:
                # the coordinators' internal topics first: Kafka's broker creates them as itself
                # (no Envelope), which would need CREATE on the cluster from 127.0.0.1 later
                assert _eventually(lambda admin=admin: _ready(admin), 90), broker
                broker.acl_shared = _shared_groups(admin)
                r = create_acls(admin, admin_acls())
                assert [x.error_code for x in r.results] == [0] * 5, broker
                assert _eventually(lambda admin=admin: len(described(describe_acls(admin))) == 5)
        yield b


# a topic every group scenario shares, with a KIP-848 group "{s}-848" and a share group "{s}-sh"
# whose admin member is assigned it (a member's first assignment takes a while on Kafka), and
# "{s}-other", for a regex matching both
SHARED = "aclsh"


def _shared_groups(admin) -> tuple:
    """Made before any ACL (Kafka's broker creates __share_group_state as itself, which would
    need CREATE on the cluster from 127.0.0.1 later): (the topic's id, {topic id: name})."""
    for name in (SHARED, f"{SHARED}-other"):
        assert Api(admin).create_topic(name).error_code == 0
    rq.consumer_group_join(admin, f"{SHARED}-848", SHARED)
    tid = rq.share_group_join(admin, f"{SHARED}-sh", SHARED)
    return tid, {x.topic_id: x.name for x in Api(admin).metadata([SHARED, f"{SHARED}-other"]).topics}


def _ready(admin) -> bool:
    """The coordinators' internal topics exist (no COORDINATOR_NOT_AVAILABLE to race on)."""
    return rq.find_coordinator(admin, 0, "ready") == 0 and rq.find_coordinator(admin, 1, "ready") == 0


def _eventually(check, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


# each: the ACLs of User:ANONYMOUS from 127.0.0.1; "{t}" is the scenario's topic
SCENARIOS = {
    "none": [],
    "read": [("TOPIC", "{t}", "READ")],
    "write": [("TOPIC", "{t}", "WRITE")],
    "describe": [("TOPIC", "{t}", "DESCRIBE")],
    "all-but-write": [("TOPIC", "{t}", "ALL"), ("TOPIC", "{t}", "WRITE", "DENY")],
    "prefixed-write": [("TOPIC", "acl-prefixed-write-", "WRITE", "ALLOW", "PREFIXED")],
    "wildcard-read": [("TOPIC", "*", "READ")],
    "create-on-cluster": [("CLUSTER", "kafka-cluster", "CREATE")],
    "create-on-topic": [("TOPIC", "{t}-new", "CREATE"), ("TOPIC", "{t}-new", "DESCRIBE")],
    "delete": [("TOPIC", "{t}-del", "DELETE")],
    "configs": [("TOPIC", "{t}", "DESCRIBE_CONFIGS"), ("TOPIC", "{t}", "ALTER_CONFIGS")],
    "describe-configs-only": [("TOPIC", "{t}", "DESCRIBE_CONFIGS")],
    "acl-admin": [("CLUSTER", "kafka-cluster", "ALTER")],
    "acl-reader": [("CLUSTER", "kafka-cluster", "DESCRIBE")],
    "deny-all-host-star": [("TOPIC", "{t}", "ALL"), ("TOPIC", "{t}", "READ", "DENY")],
}


def _acls(spec, topic: str) -> list[dict]:
    out = []
    for item in spec:
        rtype, name, op = item[:3]
        perm = item[3] if len(item) > 3 else "ALLOW"
        pattern = item[4] if len(item) > 4 else "LITERAL"
        out.append(acl(rtype, name.format(t=topic), op, perm=perm, host=CLIENT_HOST, pattern=pattern))
    return out


def _requests(c: WireClient, topic: str) -> dict:
    """The client's requests and what each answered (error codes, visible topics)."""
    api = Api(c)
    out = {}
    out["produce"] = int(api.produce(topic, build_batch([(None, b"v", ())])).error_code)
    fetched = api.fetch(topic, 0)
    out["fetch"] = [int(p.error_code) for t in fetched.responses for p in t.partitions]
    md = api.metadata([topic])
    out["metadata"] = [int(t.error_code) for t in md.topics]
    everything = api.metadata(None)
    out["visible"] = sorted(t.name for t in everything.topics if t.name.startswith(topic))
    m = Msg(ApiKeys.METADATA, 12)
    ops = c.request(
        ApiKeys.METADATA,
        12,
        m(
            topics=(m("MetadataRequestTopic", name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        ),
    )
    out["topic_ops"] = [t.topic_authorized_operations for t in ops.topics]
    # the cluster's authorized operations: 0 without DESCRIBE on the cluster (Kafka's AuthHelper)
    m = Msg(ApiKeys.DESCRIBE_CLUSTER, 1)
    dc = c.request(ApiKeys.DESCRIBE_CLUSTER, 1, m(include_cluster_authorized_operations=True, endpoint_type=1))
    out["cluster_ops"] = dc.cluster_authorized_operations
    created = api.create_topics([{"name": f"{topic}-new", "num_partitions": 1, "replication_factor": 1}])
    out["create_topic"] = [int(t.error_code) for t in created.topics]
    m = Msg(ApiKeys.DELETE_TOPICS, 6)
    deleted = c.request(
        ApiKeys.DELETE_TOPICS,
        6,
        m(topics=(m("DeleteTopicState", name=f"{topic}-del", topic_id=None),), timeout=10000),
    )
    out["delete_topic"] = [int(t.error_code) for t in deleted.responses]
    m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
    dc = c.request(
        ApiKeys.DESCRIBE_CONFIGS,
        4,
        m(
            resources=(m("DescribeConfigsResource", resource_type=2, resource_name=topic, configuration_keys=None),),
            include_synonyms=False,
            include_documentation=False,
        ),
    )
    out["describe_configs"] = [int(r.error_code) for r in dc.results]
    m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
    ac = c.request(
        ApiKeys.INCREMENTAL_ALTER_CONFIGS,
        1,
        m(
            resources=(
                m(
                    "AlterConfigsResource",
                    resource_type=2,
                    resource_name=topic,
                    configs=(m("AlterableConfig", name="retention.ms", config_operation=0, value="600000"),),
                ),
            ),
            validate_only=True,
        ),
    )
    out["alter_configs"] = [int(r.error_code) for r in ac.responses]
    out["describe_acls"] = int(describe_acls(c, principal="User:nobody").error_code)
    created_acls = create_acls(c, [acl("TOPIC", f"{topic}-x", "READ", principal="User:nobody")])
    out["create_acls"] = [int(r.error_code) for r in created_acls.results]
    dropped = delete_acls(c, [{"principal": "User:nobody"}])
    out["delete_acls"] = [int(r.error_code) for r in dropped.filter_results]
    return out


def _run(broker, name: str, topic: str) -> dict:
    acls = _acls(SCENARIOS[name], topic)
    with BoundWireClient(broker.bootstrap_servers, ADMIN_HOST) as admin:
        for t in (topic, f"{topic}-del"):
            assert Api(admin).create_topic(t).error_code == 0
        if acls:
            assert [r.error_code for r in create_acls(admin, acls).results] == [0] * len(acls)
        assert _eventually(lambda: len(described(describe_acls(admin, host=CLIENT_HOST))) == len(acls) + 1)
        try:
            with WireClient(broker.bootstrap_servers) as c:
                return _requests(c, topic)
        finally:
            delete_acls(admin, [{"host": CLIENT_HOST, "rtype": "TOPIC"}])
            delete_acls(admin, [{"host": CLIENT_HOST, "rtype": "CLUSTER", "op": op} for op in ("CREATE", "ALTER")])
            delete_acls(admin, [{"host": CLIENT_HOST, "rtype": "CLUSTER", "op": "DESCRIBE"}])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_answers_for_the_same_acls(pair, name):
    topic = f"acl-{name}-{oracle.new_topic('')[1:]}"  # the same names on both
    results = {which: _run(broker, name, topic) for which, broker in pair.items()}
    assert results["kesque"] == results["kafka"]
    if name == "none":  # not vacuous: with no ACL of its own the client is refused everything
        assert results["kafka"]["produce"] == 29 and results["kafka"]["visible"] == []
        assert results["kafka"]["create_acls"] == [31] and results["kafka"]["describe_configs"] == [29]
    if name == "configs":
        assert results["kafka"]["describe_configs"] == [0] and results["kafka"]["alter_configs"] == [0]


# groups, offsets and transactions: "{g}" and "{x}" are the scenario's group and transactional id
GROUP_SCENARIOS = {
    "none": [],
    "group-read": [("GROUP", "{g}", "READ"), ("GROUP", "{g}-848", "READ"), ("TOPIC", "{t}", "READ")],
    "group-describe-only": [("GROUP", "{g}", "DESCRIBE"), ("TOPIC", "{t}", "DESCRIBE")],
    "group-read-no-topic": [("GROUP", "{g}", "READ"), ("GROUP", "{g}-848", "READ")],
    "group-delete": [("GROUP", "{g}", "DELETE"), ("TOPIC", "{t}", "READ")],
    "group-all-prefixed": [("GROUP", "{g}", "ALL", "ALLOW", "PREFIXED"), ("TOPIC", "{t}", "ALL")],
    "cluster-describe": [("CLUSTER", "kafka-cluster", "DESCRIBE")],
    "txn-write": [("TRANSACTIONAL_ID", "{x}", "WRITE"), ("TOPIC", "{t}", "WRITE"), ("GROUP", "{g}", "READ")],
    "txn-describe": [("TRANSACTIONAL_ID", "{x}", "DESCRIBE")],
    "txn-no-topic": [("TRANSACTIONAL_ID", "{x}", "WRITE")],
    "idempotent-write": [("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")],
    "write-some-topic": [("TOPIC", "{t}", "WRITE", "ALLOW", "PREFIXED")],
    "write-denied-topic": [("TOPIC", "*", "WRITE"), ("TOPIC", "*", "WRITE", "DENY")],
    # KIP-848 describe and share groups on the shared topic {s} ({g}-alt: an empty share group)
    "share-read": [
        ("GROUP", "{s}-sh", "READ"),
        ("GROUP", "{s}-848", "DESCRIBE"),
        ("GROUP", "{g}-alt", "READ"),
        ("GROUP", "{g}-alt", "DELETE"),
        ("TOPIC", "{s}", "READ"),
    ],
    "share-no-topic": [("GROUP", "{s}-sh", "READ"), ("GROUP", "{s}-848", "READ"), ("GROUP", "{g}-alt", "ALL")],
    "share-topic-describe": [
        ("GROUP", "{s}-", "READ", "ALLOW", "PREFIXED"),
        ("GROUP", "{g}-alt", "READ"),
        ("TOPIC", "{s}", "DESCRIBE"),
    ],
    # a KIP-848 regex subscription matching {s} and {s}-other resolves to the topics the member may DESCRIBE
    # (its group rx-{t} is readable in these two only: a readable group with no topic to assign
    # would wait for an assignment the whole 10 s)
    "regex-one-topic": [("GROUP", "rx-{t}", "READ"), ("TOPIC", "{s}", "DESCRIBE")],
    "regex-prefixed": [("GROUP", "rx-{t}", "READ"), ("TOPIC", "{s}", "DESCRIBE", "ALLOW", "PREFIXED")],
}


def _group_acls(spec, t: str, g: str, x: str) -> list[dict]:
    out = []
    for item in spec:
        rtype, name, op = item[:3]
        perm = item[3] if len(item) > 3 else "ALLOW"
        pattern = item[4] if len(item) > 4 else "LITERAL"
        name = name.format(t=t, g=g, x=x, s=SHARED)
        out.append(acl(rtype, name, op, perm=perm, host=CLIENT_HOST, pattern=pattern))
    return out


def _run_groups(broker, name: str, t: str) -> dict:
    g, x = f"{t}-g", f"{t}-x"
    acls = _group_acls(GROUP_SCENARIOS[name], t, g, x)
    with BoundWireClient(broker.bootstrap_servers, ADMIN_HOST) as admin:
        assert Api(admin).create_topic(t).error_code == 0
        # the group exists, with an offset (once the broker knows the new topic)
        assert _eventually(lambda: rq.offset_commit(admin, g, [t]) == {t: [0]})
        tid, names = broker.acl_shared
        if acls:
            assert [r.error_code for r in create_acls(admin, acls).results] == [0] * len(acls)
        assert _eventually(lambda: len(described(describe_acls(admin, host=CLIENT_HOST))) == len(acls) + 1)
        try:
            with WireClient(broker.bootstrap_servers) as c:
                out = rq.group_requests(c, g, t)
                out.update(rq.txn_requests(c, x, g, t))
                out["write_txn_markers"] = rq.write_txn_markers(c, t)
                out["add_partitions_v4"] = rq.add_partitions_to_txn_v4(c, x, t)
                out["delete_group"] = rq.delete_groups(c, g)
                out.update(rq.share_requests(c, SHARED, tid, g))
                out["cg_regex"] = rq.regex_heartbeat(c, f"rx-{t}", f"{SHARED}(-other)?", names)
                return out
        finally:
            for rtype in ("TOPIC", "GROUP", "TRANSACTIONAL_ID"):
                delete_acls(admin, [{"host": CLIENT_HOST, "rtype": rtype}])
            delete_acls(
                admin, [{"host": CLIENT_HOST, "rtype": "CLUSTER", "op": op} for op in ("DESCRIBE", "IDEMPOTENT_WRITE")]
            )


@pytest.mark.parametrize("name", sorted(GROUP_SCENARIOS))
def test_same_group_and_transaction_answers_for_the_same_acls(pair, name):
    topic = f"aclg-{name}-{oracle.new_topic('')[1:]}"
    results = {which: _run_groups(broker, name, topic) for which, broker in pair.items()}
    assert results["kesque"] == results["kafka"]
    if name == "none":  # not vacuous (a refused heartbeat: the error only, member epoch 0)
        assert results["kafka"]["join"] == 30 and results["kafka"]["init_txn"] == 53
        assert results["kafka"]["cg_heartbeat"] == results["kafka"]["sg_heartbeat"] == (30, 0)
        assert results["kafka"]["init_idempotent"] == 31 and results["kafka"]["commit"][topic] == [30]
    if name == "group-read":  # and what is allowed goes through
        assert results["kafka"]["commit"] == {topic: [0], f"{topic}-missing": [29]}
        assert results["kafka"]["fetch"]["group"] == 0 and results["kafka"]["fetch"][topic] == [0]
    if name == "idempotent-write":
        assert results["kafka"]["init_idempotent"] == 0 and results["kafka"]["init_txn"] == 53
    if name == "share-read":  # the members' topics may be described, and read
        assert results["kafka"]["cg_describe"] == (0, None, [SHARED]) and results["kafka"]["sg_describe"][0] == 0
        assert results["kafka"]["share_fetch"] == (0, []) and results["kafka"]["sg_offsets"][1][SHARED][0][0] == 0
    if name in ("regex-one-topic", "regex-prefixed"):  # each topic the regex matches, if it may be described
        assert (
            results["kafka"]["cg_regex"]
            == {"regex-one-topic": [SHARED], "regex-prefixed": [SHARED, f"{SHARED}-other"]}[name]
        )
    if name == "share-no-topic":  # the groups refused for their topics
        assert results["kafka"]["cg_describe"][0] == results["kafka"]["sg_describe"][0] == 29
        assert results["kafka"]["share_fetch"] == (0, [(29, 0)]) and results["kafka"]["share_ack"] == (0, [29])
        assert results["kafka"]["sg_offsets"] == (0, {SHARED: [(29, "Topic authorization failed.")]})


# the remaining APIs Kafka authorizes (ListOffsets, OffsetForLeaderEpoch, DeleteRecords, log dirs,
# elections, reassignments, DescribeProducers)
ADMIN_SCENARIOS = {
    "none": [],
    "topic-describe": [("TOPIC", "{t}", "DESCRIBE")],
    "topic-read": [("TOPIC", "{t}", "READ")],
    "topic-delete": [("TOPIC", "{t}", "DELETE")],
    "cluster-alter": [("CLUSTER", "kafka-cluster", "ALTER")],
    "cluster-describe": [("CLUSTER", "kafka-cluster", "DESCRIBE")],
}


def _run_admin(broker, name: str, t: str) -> dict:
    acls = _group_acls(ADMIN_SCENARIOS[name], t, "", "")
    with BoundWireClient(broker.bootstrap_servers, ADMIN_HOST) as admin:
        assert Api(admin).create_topic(t).error_code == 0
        assert _eventually(lambda: rq.list_offsets(admin, t) == [0])
        if acls:
            assert [r.error_code for r in create_acls(admin, acls).results] == [0] * len(acls)
        assert _eventually(lambda: len(described(describe_acls(admin, host=CLIENT_HOST))) == len(acls) + 1)
        try:
            with WireClient(broker.bootstrap_servers) as c:
                return rq.admin_requests(c, t)
        finally:
            delete_acls(admin, [{"host": CLIENT_HOST, "rtype": "TOPIC"}])
            delete_acls(admin, [{"host": CLIENT_HOST, "rtype": "CLUSTER", "op": op} for op in ("ALTER", "DESCRIBE")])


@pytest.mark.parametrize("name", sorted(ADMIN_SCENARIOS))
def test_same_answers_from_the_remaining_apis_for_the_same_acls(pair, name):
    topic = f"acla-{name}-{oracle.new_topic('')[1:]}"
    results = {which: _run_admin(broker, name, topic) for which, broker in pair.items()}
    assert results["kesque"] == results["kafka"]
    if name == "none":  # not vacuous
        assert results["kafka"]["list_offsets"] == [29] and results["kafka"]["describe_log_dirs"] == 31
        assert results["kafka"]["elect_leaders"][0] == 31 and results["kafka"]["alter_reassignments"][0] == 31
    if name == "cluster-alter":
        assert results["kafka"]["elect_leaders"][0] != 31 and 31 not in results["kafka"]["alter_replica_log_dirs"]
    if name == "topic-delete":
        assert results["kafka"]["delete_records"] == [0] and results["kafka"]["list_offsets"] == [0]


# ---------------------------------------------------------------------------- kafka-acls.sh

ACL_STEPS = [  # (step, arguments after --bootstrap-server, stdin)
    ("admin", "--add --allow-principal User:ANONYMOUS --operation All --cluster", None),
    ("add", "--add --allow-principal User:alice --operation Read --topic t1", None),
    ("add-again", "--add --allow-principal User:alice --operation Read --topic t1", None),
    (
        "add-hosts",
        "--add --allow-principal User:bob --allow-host 10.0.0.1 --allow-host 10.0.0.2 --operation Write --topic t2",
        None,
    ),
    ("deny", "--add --deny-principal User:eve --operation Describe --group g1", None),
    ("producer", "--add --allow-principal User:p --producer --topic pt --transactional-id tx --idempotent", None),
    (
        "consumer",
        "--add --allow-principal User:c --consumer --topic ct --group cg --resource-pattern-type prefixed",
        None,
    ),
    ("user", "--add --allow-principal User:x --operation CreateTokens --user-principal User:y", None),
    ("token", "--add --allow-principal User:x --operation Describe --delegation-token tok", None),
    ("list-all", "--list", None),
    ("list-topic", "--list --topic t1", None),
    ("list-principal", "--list --principal User:alice", None),
    ("list-match", "--list --topic ctx --resource-pattern-type match", None),
    ("list-any", "--list --topic t2 --resource-pattern-type any", None),
    ("list-none", "--list --topic nothing-here", None),
    ("remove-no", "--remove --allow-principal User:alice --operation Read --topic t1", "n\n"),
    ("remove-yes", "--remove --allow-principal User:alice --operation Read --topic t1", "y\n"),
    ("remove-all", "--remove --force --topic t2", None),
    ("list-after", "--list --topic t1", None),
    ("bad-op-for-type", "--add --allow-principal User:a --operation Write --group g", None),
    ("bad-principal", "--add --allow-principal bad --operation Read --topic x", None),
    ("no-principal", "--add --operation Read --topic x", None),
    ("no-resource", "--add --allow-principal User:x --operation Read", None),
    ("add-any", "--add --allow-principal User:x --operation Read --topic x --resource-pattern-type any", None),
    ("no-action", "", None),
    ("two-actions", "--add --list --topic x", None),
    ("list-with-producer", "--list --producer --topic x", None),
    ("idempotent-alone", "--add --allow-principal User:x --idempotent --topic x", None),
    ("consumer-no-group", "--add --allow-principal User:x --consumer --topic x", None),
    ("principal-not-list", "--add --allow-principal User:x --principal User:y --topic x", None),
]


def _acl_tool(which: str, bootstrap: str, args: str, stdin):

    argv = ["--bootstrap-server", bootstrap, *shlex.split(args)]
    if which == "kafka":
        cmd = K.java_command(K.TOOLS["kafka-acls.sh"], argv)
    else:
        cmd = [sys.executable, "-m", "kesque", "acls", *argv]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)


def _blocks(text: str) -> list:
    """Kafka prints a resource's entries (and --list its resources) in Java hash order, which
    changes between JVMs: each blank-line-separated block with its entry lines sorted, the blocks
    sorted. Stack-trace frames (``\\tat ...``) are left out."""
    out = []
    for block in text.split("\n\n"):
        lines = [x for x in block.split("\n") if x and not x.startswith("\tat ")]
        head = [x for x in lines if not x.startswith(("\t", " \t"))]
        entries = sorted(x.lstrip(" ") for x in lines if x.startswith(("\t", " \t")))
        if lines:
            out.append((head, entries))
    return sorted(out)


def _usage(stderr: str):
    first = stderr.split("\n", 1)[0]
    head, sep, ops = first.partition(" only supports operations [")
    return (head, sorted(ops.rstrip("]").split(", "))) if sep else first


def test_kafka_acls_sh_and_kesque_acls_print_the_same(tmp_path):
    """Kafka 4.4's kafka-acls.sh and kesque's, each on a kesque broker of its own, the same
    command lines: the same exit codes, the same output (byte for byte where a resource has one
    entry; where Kafka's order is a Java hash order, the same blocks), the same usage message."""

    def transcript(which: str) -> dict:
        with Broker(data_dir=str(tmp_path / which), mode="thread", config=CONFIG).start() as b:
            return {step: _acl_tool(which, b.bootstrap_servers, args, stdin) for step, args, stdin in ACL_STEPS}

    with ThreadPoolExecutor(2) as pool:  # the two transcripts at once (the tools mostly start up)
        runs = dict(zip(("kafka", "kesque"), pool.map(transcript, ("kafka", "kesque"))))
    for step, _args, _stdin in ACL_STEPS:
        j, k = runs["kafka"][step], runs["kesque"][step]
        assert (step, k.returncode) == (step, j.returncode), (j.stdout, j.stderr[:300], k.stdout, k.stderr[:300])
        if j.stdout.count("\t(principal=") <= 1 and "\tat " not in j.stdout:
            assert (step, k.stdout) == (step, j.stdout)
        else:
            assert (step, _blocks(k.stdout)) == (step, _blocks(j.stdout))
        # a usage error: the message (the option table that follows is jopt-simple's; a type's
        # operations are a Java hash set, compared as a set)
        assert (step, _usage(k.stderr)) == (step, _usage(j.stderr))
    assert "Adding ACLs for resource" in runs["kafka"]["add"].stdout  # not vacuous
    assert runs["kafka"]["list-all"].stdout.count("Current ACLs for resource") == 10


def test_kafkas_controller_listener_refuses_a_fetch_without_cluster_action(pair):
    """What test_envelope asks of a kesque controller (a lone kesque broker has no controller
    listener): a consumer's Fetch on Kafka 4.4's controller listener from a host without
    CLUSTER_ACTION."""
    kafka = pair["kafka"]
    assert controller_fetch_answers(("127.0.0.1", kafka.controller_port), "127.0.0.3", "anything") == (
        CONTROLLER_FETCH_REFUSED
    )
