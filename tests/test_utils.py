"""kesque.utils.java_string_hash against Java's String.hashCode.

The expected values were produced by running ``String.hashCode()`` on OpenJDK 17 (a tiny
program compiled with javac) for exactly these strings; they are hard-coded so the test
needs no JVM.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.utils import java_string_hash

JAVA_HASHES = [
    ("", 0),
    ("a", 97),
    ("abc", 96354),
    ("my-group", -1906497762),
    ("console-consumer-12345", 158455506),
    ("Hello, World!", 1498789909),
    # three strings whose hash is Integer.MIN_VALUE: abs() would overflow in Java, which is
    # why Kafka masks with 0x7fffffff instead
    ("polygenelubricants", -2147483648),
    ("GydZG_", -2147483648),
    ("DESIGNING WORKHOUSES", -2147483648),
    ("__consumer_offsets", -970371369),
    ("\u00e9t\u00e9", 227742),
    ("\u65e5\u672c\u8a9e", 25921943),
    ("\u0440\u0443\u0441\u0441\u043a\u0438\u0439", 1445227128),
    # supplementary characters: Java hashes the two UTF-16 code units of the surrogate pair
    ("\U0001f600", 1772899),
    ("emoji-\U0001f680-\U0001f389", 1511097008),
    ("\U00010000", 1770496),
    ("\U0010ffff", 1803232),
    ("tx-\u00ff\u0100\uffff", -861504139),
    ("a much longer transactional id that overflows many many times over 0123456789", -1097252934),
    # lone surrogates are legal in Java strings (and in Python str)
    ("\ud800x", 1714296),
    ("x\udfff", 61063),
]


@pytest.mark.parametrize("s,expected", JAVA_HASHES)
def test_matches_java_string_hashcode(s, expected):
    assert java_string_hash(s) == expected


@pytest.mark.parametrize("s,expected", JAVA_HASHES)
def test_coordinator_partition_mapping(s, expected):
    # Kafka: Utils.abs(hashCode) is not used; partitionFor masks with 0x7fffffff
    assert (java_string_hash(s) & 0x7FFFFFFF) % 50 == (expected & 0x7FFFFFFF) % 50


def _reference(s: str) -> int:
    """Straight transcription of the definition s[0]*31^(n-1) + ... over UTF-16 units."""
    units = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    h = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


@settings(max_examples=examples(300))
@given(st.text(alphabet=st.characters(blacklist_categories=())))
def test_matches_definition(s):
    h = java_string_hash(s)
    assert -(1 << 31) <= h < (1 << 31)
    assert h == _reference(s)
