"""mas_core.jsontext: orjson's text decodes to the values json.dumps(default=str) wrote, whatever the value."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from mas_core.jsontext import dumps

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text() | st.datetimes(timezones=st.just(UTC)) | st.decimals(allow_nan=False) | st.uuids())
KEYS = st.text() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.booleans() | st.none()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=20)
# A tool call's arguments, whose signature sorts their keys: decoded JSON, so every key is a string (the standard
# library cannot sort keys of mixed types either).
ARGUMENTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                              max_size=4),
                         max_leaves=20)


@given(VALUES)
def test_the_text_decodes_to_what_the_standard_library_wrote(value):
    assert json.loads(dumps(value)) == json.loads(json.dumps(value, default=str))


@given(ARGUMENTS)
def test_sorted_keys_give_one_text_for_equal_values_whatever_their_order(value):
    reordered = json.loads(json.dumps(value, default=str), object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    assert dumps(reordered, sort_keys=True) == dumps(json.loads(json.dumps(value, default=str)), sort_keys=True)
    assert json.loads(dumps(value, sort_keys=True)) == json.loads(json.dumps(value, default=str, sort_keys=True))


@dataclasses.dataclass
class Point:
    x: int


def test_what_json_cannot_hold_is_its_str_and_the_text_is_compact_and_not_escaped():
    moment = datetime(2026, 11, 29, 4, 5, 6, 789, tzinfo=UTC)
    value = {"at": moment, "day": date(2026, 11, 29), "cost": Decimal("0.10"), "id": uuid.UUID(int=7),
             "point": Point(1), "tuple": (1, 2), 3: "three", None: "none", "text": "é漢", "nul": "a\x00b"}
    assert dumps(value) == (
        '{"at":"2026-11-29 04:05:06.000789+00:00","day":"2026-11-29","cost":"0.10",'
        '"id":"00000000-0000-0000-0000-000000000007","point":"Point(x=1)","tuple":[1,2],"3":"three",'
        '"null":"none","text":"é漢","nul":"a\\u0000b"}')


def test_what_orjson_refuses_is_written_by_the_standard_library():
    deep: list = []
    inner = deep
    for _ in range(300):  # deeper than orjson's 254
        inner.append([])
        inner = inner[0]
    for value in ({"big": 2**70}, {"lone": "\ud800"}, deep):
        assert dumps(value) == json.dumps(value, default=str)


def test_nan_and_infinities_are_null_not_the_standard_librarys_invalid_json():
    assert dumps({"a": float("nan"), "b": float("inf"), "c": float("-inf")}) == '{"a":null,"b":null,"c":null}'
