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
