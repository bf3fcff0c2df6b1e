"""Client quotas on a real broker: AlterClientQuotas / DescribeClientQuotas, persistence in
the metadata log, Kafka's answers to bad input, and enforcement (throttle_time_ms, muting)."""

from __future__ import annotations

import pytest
from wire import Api, WireClient

from kesque.errors import ErrorCode

USER, CLIENT = "user", "client-id"


def described(api: Api, **kw) -> dict:
    """{entity as a sorted tuple of (type, name): {key: value}} of a DescribeClientQuotas."""
    r = api.describe_client_quotas(**kw)
    assert r.error_code == 0, r
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in r.entries}


def alter_ok(api: Api, entries, **kw) -> None:
    r = api.alter_client_quotas(entries, **kw)
    assert [(e.error_code, e.error_message) for e in r.entries] == [(0, None)] * len(entries)


def test_alter_describe_remove_and_survive_restart(broker):
    with WireClient(broker.bootstrap_servers) as c:
        api = Api(c)
        alter_ok(api, [({CLIENT: "app"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
                       ({USER: "ANONYMOUS", CLIENT: None}, {"request_percentage": 12.5}),
                       ({CLIENT: None}, {"producer_byte_rate": 4096})])
        alter_ok(api, [({CLIENT: "app"}, {"consumer_byte_rate": None})])  # remove one key
        alter_ok(api, [({CLIENT: "tmp"}, {"producer_byte_rate": 1})], validate_only=True)  # nothing written
        expected = {((CLIENT, "app"),): {"producer_byte_rate": 1024.0},
                    ((CLIENT, None), (USER, "ANONYMOUS")): {"request_percentage": 12.5},
                    ((CLIENT, None),): {"producer_byte_rate": 4096.0}}
        assert described(api) == expected
        # filters: exact name, default name, any name, strict
        assert described(api, components=[(CLIENT, 0, "app")]) == {((CLIENT, "app"),): {"producer_byte_rate": 1024.0}}
        assert set(described(api, components=[(CLIENT, 1, None)])) == {((CLIENT, None),),
                                                                         ((CLIENT, None), (USER, "ANONYMOUS"))}
        assert set(described(api, components=[(CLIENT, 1, None)], strict=True)) == {((CLIENT, None),)}
        assert set(described(api, components=[(USER, 2, None)])) == {((CLIENT, None), (USER, "ANONYMOUS"))}
    broker.restart()
    with WireClient(broker.bootstrap_servers) as c:
        assert described(Api(c)) == expected


@pytest.mark.parametrize("entity,ops,message", [
    ({CLIENT: "app"}, {"producer_byte_rate": -1}, "Quota producer_byte_rate must be greater than 0"),
    ({CLIENT: "app"}, {"bogus_rate": 5}, "Invalid configuration key bogus_rate"),
    ({"group": "g"}, {"producer_byte_rate": 5}, "Unhandled client quota entity type: group"),
    ({CLIENT: ""}, {"producer_byte_rate": 5}, "Empty client-id not supported"),
    ({"ip": "127.0.0.1"}, {"producer_byte_rate": 5}, "Invalid configuration key producer_byte_rate"),
    ({CLIENT: "app"}, {"producer_byte_rate": 1.5}, "producer_byte_rate cannot be a fractional value."),
])
def test_bad_alterations_are_refused_and_nothing_is_written(module_broker, entity, ops, message):
    with WireClient(module_broker.bootstrap_servers) as c:
        api = Api(c)
        before = described(api)
        # a good entity in the same request is still applied, as in Kafka (per-entity results)
        r = api.alter_client_quotas([(entity, ops), ({CLIENT: "good"}, {"consumer_byte_rate": 7})])
        assert [(e.error_code, e.error_message) for e in r.entries] == [(ErrorCode.invalid_request, message),
                                                                        (0, None)]
        after = described(api)
        assert after.pop(((CLIENT, "good"),)) == {"consumer_byte_rate": 7.0}
        before.pop(((CLIENT, "good"),), None)
        assert after == before


@pytest.mark.parametrize("components,code,message", [
    ([("group", 0, "g")], ErrorCode.unsupported_version, "Unsupported entity type group"),
    ([(CLIENT, 0, None)], ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(CLIENT, 2, None), (CLIENT, 1, None)], ErrorCode.invalid_request,
     "Entity type client-id cannot appear more than once in the filter."),
    ([("ip", 2, None), (USER, 2, None)], ErrorCode.invalid_request,
     "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
     "filter component."),
])
def test_bad_describe_filters(module_broker, components, code, message):
    with WireClient(module_broker.bootstrap_servers) as c:
        r = Api(c).describe_client_quotas(components=components)
        assert (r.error_code, r.error_message, r.entries) == (code, message, None)
