"""Client quotas on a real broker: AlterClientQuotas / DescribeClientQuotas, persistence in
the metadata log, Kafka's answers to bad input, and enforcement (throttle_time_ms, muting)."""

from __future__ import annotations

import time

import pytest

from conftest import running_broker
from kesque.errors import ErrorCode
from kesque.protocol.api_keys import ApiKeys
from wire import Api, ConnectionClosed, Msg, WireClient, build_batch, records_of

USER, CLIENT = "user", "client-id"


def described(api: Api, **kw) -> dict:
    """{entity as a sorted tuple of (type, name): {key: value}} of a DescribeClientQuotas."""
    r = api.describe_client_quotas(**kw)
    assert r.error_code == 0, r
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in r.entries
    }


def alter_ok(api: Api, entries, **kw) -> None:
    r = api.alter_client_quotas(entries, **kw)
    assert [(e.error_code, e.error_message) for e in r.entries] == [(0, None)] * len(entries)


def test_alter_describe_remove_and_survive_restart(broker):
    with WireClient(broker.bootstrap_servers) as c:
        api = Api(c)
        alter_ok(
            api,
            [
                ({CLIENT: "app"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
                ({USER: "ANONYMOUS", CLIENT: None}, {"request_percentage": 12.5}),
                ({CLIENT: None}, {"producer_byte_rate": 4096}),
            ],
        )
        alter_ok(api, [({CLIENT: "app"}, {"consumer_byte_rate": None})])  # remove one key
        alter_ok(api, [({CLIENT: "tmp"}, {"producer_byte_rate": 1})], validate_only=True)  # nothing written
        expected = {
            ((CLIENT, "app"),): {"producer_byte_rate": 1024.0},
            ((CLIENT, None), (USER, "ANONYMOUS")): {"request_percentage": 12.5},
            ((CLIENT, None),): {"producer_byte_rate": 4096.0},
        }
        assert described(api) == expected
        # filters: exact name, default name, any name, strict
        assert described(api, components=[(CLIENT, 0, "app")]) == {((CLIENT, "app"),): {"producer_byte_rate": 1024.0}}
        assert set(described(api, components=[(CLIENT, 1, None)])) == {
            ((CLIENT, None),),
            ((CLIENT, None), (USER, "ANONYMOUS")),
        }
        assert set(described(api, components=[(CLIENT, 1, None)], strict=True)) == {((CLIENT, None),)}
        assert set(described(api, components=[(USER, 2, None)])) == {((CLIENT, None), (USER, "ANONYMOUS"))}
    broker.restart()
    with WireClient(broker.bootstrap_servers) as c:
        assert described(Api(c)) == expected


@pytest.mark.parametrize(
    "entity,ops,message",
    [
        ({CLIENT: "app"}, {"producer_byte_rate": -1}, "Quota producer_byte_rate must be greater than 0"),
        ({CLIENT: "app"}, {"bogus_rate": 5}, "Invalid configuration key bogus_rate"),
        ({"group": "g"}, {"producer_byte_rate": 5}, "Unhandled client quota entity type: group"),
        ({CLIENT: ""}, {"producer_byte_rate": 5}, "Empty client-id not supported"),
        ({"ip": "127.0.0.1"}, {"producer_byte_rate": 5}, "Invalid configuration key producer_byte_rate"),
        ({CLIENT: "app"}, {"producer_byte_rate": 1.5}, "producer_byte_rate cannot be a fractional value."),
    ],
)
def test_bad_alterations_are_refused_and_nothing_is_written(module_broker, entity, ops, message):
    with WireClient(module_broker.bootstrap_servers) as c:
        api = Api(c)
        before = described(api)
        # a good entity in the same request is still applied, as in Kafka (per-entity results)
        r = api.alter_client_quotas([(entity, ops), ({CLIENT: "good"}, {"consumer_byte_rate": 7})])
        assert [(e.error_code, e.error_message) for e in r.entries] == [(ErrorCode.invalid_request, message), (0, None)]
        after = described(api)
        assert after.pop(((CLIENT, "good"),)) == {"consumer_byte_rate": 7.0}
        before.pop(((CLIENT, "good"),), None)
        assert after == before


@pytest.mark.parametrize(
    "components,code,message",
    [
        ([("group", 0, "g")], ErrorCode.unsupported_version, "Unsupported entity type group"),
        (
            [(CLIENT, 0, None)],
            ErrorCode.invalid_request,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            [(CLIENT, 2, None), (CLIENT, 1, None)],
            ErrorCode.invalid_request,
            "Entity type client-id cannot appear more than once in the filter.",
        ),
        (
            [("ip", 2, None), (USER, 2, None)],
            ErrorCode.invalid_request,
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
            "filter component.",
        ),
    ],
)
def test_bad_describe_filters(module_broker, components, code, message):
    with WireClient(module_broker.bootstrap_servers) as c:
        r = Api(c).describe_client_quotas(components=components)
        assert (r.error_code, r.error_message, r.entries) == (code, message, None)


# ------------------------------------------------------------------ enforcement
def throttle_ms(response) -> int:
    return int(response.throttle_time.total_seconds() * 1000)


def test_throttled_produce_and_fetch_answer_at_once_then_mute_only_that_connection(broker, topic_name):
    bs = broker.bootstrap_servers
    batch = build_batch([(None, b"x" * 1000, ())])
    with WireClient(bs, client_id="slow") as slow, WireClient(bs, client_id="fast") as fast:
        api = Api(fast)
        api.create_topic(topic_name)
        alter_ok(api, [({CLIENT: "slow"}, {"producer_byte_rate": 1})])
        # ~1 kB at 1 B/s over the 10 s minimum window: throttled for ~1000 s, answered now
        r = slow.request(ApiKeys.PRODUCE, 9, Api(slow).produce_request(topic_name, batch))
        assert r.responses[0].partition_responses[0].error_code == 0
        assert throttle_ms(r) > 600_000
        # the slow connection is muted: its next request is not even read...
        slow.send(
            ApiKeys.API_VERSIONS, 3, Msg(ApiKeys.API_VERSIONS, 3)(client_software_name="t", client_software_version="1")
        )
        with pytest.raises(TimeoutError):
            slow.recv_frame(timeout=1.0)
        # ...while other connections are served, unthrottled
        r = fast.request(ApiKeys.PRODUCE, 9, api.produce_request(topic_name, batch))
        assert (r.responses[0].partition_responses[0].error_code, throttle_ms(r)) == (0, 0)
    with WireClient(bs, client_id="slow-reader") as slow, WireClient(bs, client_id="fast") as fast:
        alter_ok(Api(fast), [({CLIENT: "slow-reader"}, {"consumer_byte_rate": 1})])
        # over its quota: an empty response with the throttle time (as Kafka), then muted
        r = Api(slow).fetch(topic_name, 0)
        assert throttle_ms(r) > 600_000 and r.responses == ()
        slow.send(
            ApiKeys.API_VERSIONS, 3, Msg(ApiKeys.API_VERSIONS, 3)(client_software_name="t", client_software_version="1")
        )
        with pytest.raises(TimeoutError):
            slow.recv_frame(timeout=1.0)
        r = Api(fast).fetch(topic_name, 0)
        assert throttle_ms(r) == 0 and len(records_of(r.responses[0].partitions[0].records)) == 2


def test_precedence_on_a_real_broker(broker, topic_name):
    """Kafka's eight levels, all of which apply without authentication (the user is
    ANONYMOUS): quotas are added from the least specific level to the most specific, each
    one flipping a client between throttled (1 B/s) and not (1 GB/s), so each level is seen
    to win over the less specific ones already set."""
    bs = broker.bootstrap_servers
    batch = build_batch([(None, b"x" * 1000, ())])
    slow, fast = 1, 10**9

    def set_level(entity: dict, bound: int) -> None:
        with WireClient(bs, client_id="admin") as c:
            alter_ok(Api(c), [(entity, {"producer_byte_rate": bound})])

    def throttled(client_id: str) -> bool:
        with WireClient(bs, client_id=client_id) as c:  # a fresh connection: a throttled one is muted
            return throttle_ms(c.request(ApiKeys.PRODUCE, 9, Api(c).produce_request(topic_name, batch))) > 0

    with WireClient(bs, client_id="admin") as c:
        Api(c).create_topic(topic_name)
    anon = "ANONYMOUS"
    steps = [  # (level, entity, bound, client that checks it, throttled?)
        (8, {CLIENT: None}, slow, "c-8", True),
        (7, {CLIENT: "c-7"}, fast, "c-7", False),
        (6, {USER: None}, slow, "c-7", True),
        (5, {USER: None, CLIENT: None}, fast, "c-5", False),
        (4, {USER: None, CLIENT: "c-4"}, slow, "c-4", True),
        (3, {USER: anon}, fast, "c-4", False),
        (2, {USER: anon, CLIENT: None}, slow, "c-2", True),
        (1, {USER: anon, CLIENT: "c-2"}, fast, "c-2", False),
    ]
    for level, entity, bound, client, expected in steps:
        set_level(entity, bound)
        assert throttled(client) == expected, f"level {level}: {entity}"


def test_request_percentage_throttles_a_metadata_flood_without_starving_others(tmp_path):
    # two 1 s samples: the rate is over 1-2 s rather than 10-11 s, so the flood is noticed sooner
    with running_broker(tmp_path / "data", {"quota.window.num": 2}) as broker:
        flood_metadata(broker.bootstrap_servers)


def flood_metadata(bs: str) -> None:
    with WireClient(bs, client_id="flood") as flood, WireClient(bs, client_id="calm") as calm:
        alter_ok(Api(calm), [({CLIENT: "flood"}, {"request_percentage": 10})])
        m = Msg(ApiKeys.METADATA, 12)
        req = m(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        delays = []
        for _ in range(3000):  # bounded; the handler time of these is well over 10% of the loop's time
            delays = [throttle_ms(r) for _c, r in flood.pipeline([(3, 12, req)] * 100, timeout=30)]
            if any(delays):
                break
        assert 0 < max(delays) <= 1000  # a request-time delay is at most one sample window
        assert throttle_ms(Api(calm).metadata(None)) == 0


def test_controller_mutation_rate_strict_and_permissive(broker, topic_name):
    bs = broker.bootstrap_servers
    with WireClient(bs, client_id="admin") as c:
        alter_ok(Api(c), [({CLIENT: "creator"}, {"controller_mutation_rate": 1})])

    def create(name: str, partitions: int, version: int):
        with WireClient(bs, client_id="creator") as c:  # a fresh connection: a throttled one is muted
            r = Api(c).create_topics([{"name": name, "num_partitions": partitions}], version=version)
            t = r.topics[0]
            return t.error_code, t.error_message, throttle_ms(r)

    # the bucket holds 11 s x 1/s = 11 partitions: a 20-partition topic overdraws it (accepted)
    assert create(topic_name + "-a", 20, 7) == (0, None, 0)
    # strict (v6+): refused while the bucket is below zero, with the time until it is not
    code, message, delay = create(topic_name + "-b", 1, 7)
    assert (code, message) == (ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")
    assert 0 < delay <= 9000
    # permissive (v5): created, and the client is told to wait
    code, _message, delay = create(topic_name + "-c", 1, 5)
    assert code == 0 and 0 < delay <= 10000
    with WireClient(bs, client_id="admin") as c:  # other clients are not limited
        assert Api(c).create_topics([{"name": topic_name + "-d", "num_partitions": 50}]).topics[0].error_code == 0


def test_connection_limits_per_ip(tmp_path):
    config = {"quota.window.num": 2, "max.connections.per.ip.overrides": "127.0.0.1:3"}
    with running_broker(tmp_path / "data", config) as broker:
        bs = broker.bootstrap_servers

        def answers(c: WireClient) -> bool:
            try:
                Api(c).api_versions()
                return True
            except (ConnectionClosed, ConnectionError, TimeoutError):
                return False

        # max.connections.per.ip.overrides: a 4th connection from 127.0.0.1 is closed at once
        clients = [WireClient(bs, timeout=5) for _ in range(3)]
        assert all(answers(c) for c in clients)
        with WireClient(bs, timeout=5) as extra:
            assert extra.is_closed(timeout=5)
        clients.pop().close()

        def reconnects() -> bool:  # once the broker has seen the close
            with WireClient(bs, timeout=5) as again:
                return answers(again)

        assert any(reconnects() or time.sleep(0.2) for _ in range(50))
        for c in clients:
            c.close()
        # connection_creation_rate on the default IP: new connections past 2/s are refused
        with WireClient(bs) as c:
            alter_ok(Api(c), [({"ip": None}, {"connection_creation_rate": 2})])
        refused = 0
        for _ in range(10):  # bounded: far more than 2/s over a 1-2 s window
            with WireClient(bs, timeout=5) as c:
                if not answers(c):
                    refused += 1
        assert refused > 0


def test_requests_already_received_wait_for_the_throttle_too(broker, topic_name):
    """Kafka reads one request at a time per connection; requests that arrived pipelined
    behind the throttled one are not processed before the delay is over either."""
    bs = broker.bootstrap_servers
    batch = build_batch([(None, b"x" * 1000, ())])
    with WireClient(bs, client_id="admin") as c:
        Api(c).create_topic(topic_name)
        alter_ok(Api(c), [({CLIENT: "piped"}, {"producer_byte_rate": 1})])
    with WireClient(bs, client_id="piped") as c:
        req = Api(c).produce_request(topic_name, batch)
        data = b"".join(c.encode(ApiKeys.PRODUCE, 9, req)[1] for _ in range(2))
        c.send_raw(data)  # both requests in one segment: the broker reads them together
        _corr, first = c.recv(ApiKeys.PRODUCE, 9)
        assert throttle_ms(first) > 600_000
        with pytest.raises(TimeoutError):
            c.recv_frame(timeout=1.0)


def test_request_time_does_not_count_a_long_poll_wait(broker, topic_name):
    bs = broker.bootstrap_servers
    with WireClient(bs, client_id="admin") as c:
        Api(c).create_topic(topic_name)
        alter_ok(Api(c), [({CLIENT: "poller"}, {"request_percentage": 1})])
    with WireClient(bs, client_id="poller") as c:
        # 2 x 500 ms of waiting would be 10% of the 10 s window; the handler's own time is far below 1%
        for _ in range(2):
            r = Api(c).fetch(topic_name, 0, max_wait=500, min_bytes=1)
            assert throttle_ms(r) == 0


def test_an_alter_on_one_node_of_a_cluster_applies_on_every_node():
    """A quota altered through one node is a ClientQuotaRecord in the replicated metadata log:
    every node describes it and throttles the client on the partitions it leads."""
    from test_quorum_cluster import Nodes, create, placement

    nodes = Nodes(3)
    try:
        nodes.start()
        c, api = nodes.api(0)
        with c:
            alter_ok(api, [({CLIENT: "slow"}, {"producer_byte_rate": 1})])
            assert create(api, "quota-spread", partitions=3, rf=1).error_code == 0
            leaders = {leader: p for p, (leader, _r) in placement(api, "quota-spread").items()}
        assert len(leaders) >= 2, leaders  # placement spreads leaders: other nodes than the altered one
        batch = build_batch([(None, b"x" * 1000, ())])
        for i in range(3):
            c, api = nodes.api(i)
            with c:
                deadline = time.monotonic() + 10
                while described(api) != {((CLIENT, "slow"),): {"producer_byte_rate": 1.0}}:
                    assert time.monotonic() < deadline, described(api)
                    time.sleep(0.1)
            if i + 1 not in leaders:
                continue
            with WireClient(("127.0.0.1", nodes.brokers[i].port), client_id="slow") as slow:
                r = slow.request(
                    ApiKeys.PRODUCE, 9, Api(slow).produce_request("quota-spread", batch, partition=leaders[i + 1])
                )
                assert r.responses[0].partition_responses[0].error_code == 0
                assert throttle_ms(r) > 600_000, f"node {i + 1} did not throttle"
    finally:
        nodes.close()
