"""ApiKeys (Kafka's names for the API keys) and the strict message builder."""

from __future__ import annotations

import re

from kesque.protocol.api import FLEXIBLE_FROM
from kesque.protocol.api_keys import ApiKeys


def _upper_snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def test_api_keys_are_kafkas_names_for_every_key_kesque_knows():
    # FLEXIBLE_FROM's names come from Kafka's message schemas; Kafka's ApiKeys spells them
    # in upper snake case (JoinGroup -> JOIN_GROUP)
    assert {k.value: k.name for k in ApiKeys} == {k: _upper_snake(n) for k, (n, _) in FLEXIBLE_FROM.items()}


def test_an_api_key_is_its_number_on_the_wire():
    assert ApiKeys.PRODUCE == 0 and ApiKeys.FETCH == 1 and ApiKeys.END_TXN == 26
    assert f"{ApiKeys.END_TXN}" == "26" and str(ApiKeys.FETCH) == "1" and hash(ApiKeys.FETCH) == hash(1)


# ---------------------------------------------------------------------------- strict messages
import pytest  # noqa: E402

from kesque.protocol.messages import Msg, known_fields  # noqa: E402


def test_a_misspelled_field_raises_naming_the_api_the_struct_and_the_field():
    with pytest.raises(TypeError, match=r"EndTxn response has no field 'throttle_time_ms' in any version"):
        Msg(ApiKeys.END_TXN, 5)(throttle_time_ms=0, error_code=0)
    m = Msg(ApiKeys.JOIN_GROUP, 9)
    with pytest.raises(TypeError, match=r"JoinGroup response struct JoinGroupResponseMember has no field 'memberid'"):
        m("JoinGroupResponseMember", memberid="m1", metadata=b"")
    with pytest.raises(TypeError, match=r"ListOffsets request struct ListOffsetsTopic has no field 'partition'"):
        Msg(ApiKeys.LIST_OFFSETS, 9, request=True)("ListOffsetsTopic", name="t", partition=())


def test_a_field_of_another_version_is_dropped_silently():
    # EndTxn v5 adds producer_id / producer_epoch; v4 has neither and takes them quietly
    old = Msg(ApiKeys.END_TXN, 4)(throttle_time=0, error_code=0, producer_id=7, producer_epoch=1)
    assert not hasattr(old, "producer_id")
    new = Msg(ApiKeys.END_TXN, 5)(throttle_time=0, error_code=0, producer_id=7, producer_epoch=1)
    assert (new.producer_id, new.producer_epoch) == (7, 1)
    # JoinGroup v0 has no protocol_type, skip_assignment, group_instance_id
    m = Msg(ApiKeys.JOIN_GROUP, 0)
    member = m("JoinGroupResponseMember", member_id="a", group_instance_id="i", metadata=b"")
    resp = m(
        throttle_time=0,
        error_code=0,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader="a",
        skip_assignment=False,
        member_id="a",
        members=(member,),
    )
    assert resp.members[0].member_id == "a" and not hasattr(resp, "protocol_type")


def test_a_nested_struct_of_another_version_is_none_and_an_unknown_one_raises():
    # Metadata: no version has a "MetadataResponseBrokers" struct
    with pytest.raises(TypeError, match=r"Metadata response has no struct 'MetadataResponseBrokers' in any version"):
        Msg(ApiKeys.METADATA, 12)("MetadataResponseBrokers", node_id=1)
    # Fetch: NodeEndpoint (KIP-951) exists from v16 only
    assert Msg(ApiKeys.FETCH, 12)("NodeEndpoint", node_id=1, host="h", port=1, rack=None) is None
    assert Msg(ApiKeys.FETCH, 16)("NodeEndpoint", node_id=1, host="h", port=1, rack=None).port == 1
    with pytest.raises(TypeError, match=r"Fetch response struct NodeEndpoint has no field 'hostname'"):
        Msg(ApiKeys.FETCH, 16)("NodeEndpoint", node_id=1, hostname="h", port=1, rack=None)


def test_times_are_still_converted_and_has_answers_for_this_version():
    m = Msg(ApiKeys.JOIN_GROUP, 9)
    assert (
        m(
            throttle_time=250,
            error_code=0,
            generation_id=1,
            protocol_type=None,
            protocol_name=None,
            leader="",
            skip_assignment=False,
            member_id="",
            members=(),
        ).throttle_time.total_seconds()
        == 0.25
    )
    assert m.has(None, "skip_assignment") and not Msg(ApiKeys.JOIN_GROUP, 8).has(None, "skip_assignment")


@pytest.mark.parametrize("request_", [True, False], ids=["request", "response"])
def test_the_fields_read_from_kios_source_are_the_fields_its_classes_declare(request_):
    # known_fields reads kio's generated source (fast); importing every version is the reference
    for key in ApiKeys:
        assert known_fields(key, request_) == known_fields(key, request_, from_source=False), key.name
