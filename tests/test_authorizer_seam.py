"""The authorization seam (issue 26, item 2): every request's context carries the listener's
security protocol, the client's address and the principal (``User:ANONYMOUS`` on PLAINTEXT),
and the Produce, Fetch, Metadata and CreateTopics handlers ask the broker's authorizer where
Kafka's do. kesque has no authorizer yet (issue 27 brings ACLs): with none, everything is
allowed; these tests plug in a recording one to show it is asked, and what a refusal answers.
"""

from __future__ import annotations

import pytest

from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.server.context import ANONYMOUS, AclOperation, RequestContext, ResourceType
from kesque.testing.broker import Broker
from wire import Api, Msg, WireClient

NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID = 0, 29, 100


class Recording:
    """Allows all but the (operation, resource type, name) in ``deny``; keeps every question."""

    def __init__(self, deny=()):
        self.deny = set(deny)
        self.asked = []

    def authorize(self, ctx, operation, resource_type, name) -> bool:
        self.asked.append((str(ctx.principal), ctx.security_protocol, operation.name, resource_type.name, name))
        return (operation.name, resource_type.name, name) not in self.deny


def test_no_authorizer_allows_everything_and_the_context_says_who_asks():
    ctx = RequestContext(None, None, "PLAINTEXT")
    assert ctx.authorizer is None and ctx.principal == ANONYMOUS and str(ctx.principal) == "User:ANONYMOUS"
    assert ctx.security_protocol == "PLAINTEXT" and ctx.client_address == ("?", 0)
    assert ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, "t")
    ctx.authorizer = Recording(deny=[("WRITE", "TOPIC", "t")])
    assert not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert ctx.authorize(AclOperation.READ, ResourceType.TOPIC, "t")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    b = Broker(data_dir=str(tmp_path_factory.mktemp("authz") / "data"), mode="thread").start()
    try:
        with WireClient(b.bootstrap_servers) as c:
            for t in ("open", "no-write", "no-read", "hidden"):
                Api(c).create_topic(t)
                assert Api(c).produce(t, build_batch([(None, b"v", ())])).error_code == NONE
        yield b
    finally:
        b._server.authorizer = None
        b.stop()


@pytest.fixture
def authorizer(node):
    a = node._server.authorizer = Recording(
        deny=[
            ("WRITE", "TOPIC", "no-write"),
            ("READ", "TOPIC", "no-read"),
            ("DESCRIBE", "TOPIC", "hidden"),
            ("CREATE", "CLUSTER", "kafka-cluster"),
            ("CREATE", "TOPIC", "no-create"),
        ]
    )
    yield a
    node._server.authorizer = None


def test_produce_asks_write_on_each_topic(node, authorizer):
    with WireClient(node.bootstrap_servers) as c:
        assert Api(c).produce("no-write", build_batch([(None, b"x", ())])).error_code == TOPIC_AUTHORIZATION_FAILED
        assert Api(c).produce("open", build_batch([(None, b"x", ())])).error_code == NONE
    assert ("User:ANONYMOUS", "PLAINTEXT", "WRITE", "TOPIC", "no-write") in authorizer.asked
    assert ("User:ANONYMOUS", "PLAINTEXT", "WRITE", "TOPIC", "open") in authorizer.asked


def test_fetch_asks_read_on_each_topic_and_cluster_action_of_a_replica(node, authorizer):
    with WireClient(node.bootstrap_servers) as c:
        r = Api(c).fetch("no-read", 0)
        assert r.responses[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
        r = Api(c).fetch("open", 0)
        assert r.responses[0].partitions[0].error_code == NONE and r.responses[0].partitions[0].records
        authorizer.deny.add(("CLUSTER_ACTION", "CLUSTER", "kafka-cluster"))
        r = c.request(ApiKeys.FETCH, 12, replica_fetch("open", replica_id=2))
        assert r.responses[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
    assert ("User:ANONYMOUS", "PLAINTEXT", "READ", "TOPIC", "no-read") in authorizer.asked
    assert ("User:ANONYMOUS", "PLAINTEXT", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster") in authorizer.asked


def replica_fetch(topic: str, replica_id: int):
    m = Msg(ApiKeys.FETCH, 12)
    part = m.loose(
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return m.loose(
        cluster_id=None,
        replica_id=replica_id,
        max_wait=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(m.loose("FetchTopic", topic=topic, topic_id=None, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_metadata_asks_describe_and_hides_what_it_may_not(node, authorizer):
    with WireClient(node.bootstrap_servers) as c:
        everything = Api(c).metadata(None)
        names = {t.name for t in everything.topics}
        assert "open" in names and "hidden" not in names
        r = Api(c).metadata(["hidden", "open"])
        assert [(t.name, t.error_code) for t in r.topics] == [("hidden", TOPIC_AUTHORIZATION_FAILED), ("open", NONE)]
        # auto-creation needs CREATE on the cluster or the topic
        r = Api(c).metadata(["no-create"], allow_auto=True)
        assert r.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
    assert ("User:ANONYMOUS", "PLAINTEXT", "DESCRIBE", "TOPIC", "hidden") in authorizer.asked


def test_create_topics_asks_create_on_the_cluster_then_the_topic(node, authorizer):
    with WireClient(node.bootstrap_servers) as c:
        r = Api(c).create_topics([{"name": "no-create"}, {"name": "made"}])
        assert [(t.name, t.error_code) for t in r.topics] == [("no-create", TOPIC_AUTHORIZATION_FAILED), ("made", NONE)]
        assert r.topics[0].error_message == "Authorization failed."
    assert ("User:ANONYMOUS", "PLAINTEXT", "CREATE", "CLUSTER", "kafka-cluster") in authorizer.asked
    assert ("User:ANONYMOUS", "PLAINTEXT", "CREATE", "TOPIC", "made") in authorizer.asked
