"""``stackdist.output.typed_schema``: each typing form becomes the JSON Schema that accepts exactly
the values of that type (checked with ``jsonschema`` on values that fit and values that do not)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

import pytest

from stackdist.output.typed_schema import (
    field_rows,
    json_schema,
    output_schema,
    unit_of,
)

jsonschema = pytest.importorskip("jsonschema")


class Inner(TypedDict):
    gib: float  # the size
    name: str | None


class _Base(TypedDict):
    n: int


class Outer(_Base, total=False):
    """An outer object."""

    inner: Inner
    rows: list[Inner]
    by_name: dict[str, int]
    kind: Literal["a", "b"]
    pair: tuple[int, ...]
    anything: Any
    loose: dict[str, Any]


@dataclasses.dataclass
class Point:
    x_s: float  # seconds since start
    label: str


def _valid(tp: Any, value: Any) -> bool:
    defs: dict[str, Any] = {}
    schema = {**json_schema(tp, defs), "$defs": defs}
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("value, ok", [
    ({"n": 1}, True),
    ({"n": 1, "inner": {"gib": 1, "name": None}, "rows": [{"gib": 2.5, "name": "x"}], "by_name": {"a": 1},
      "kind": "b", "pair": [1, 2, 3], "anything": [None], "loose": {"x": {}}}, True),
    ({}, False),  # n is required (a required base key under a total=False class)
    ({"n": True}, False),  # a boolean is not an integer
    ({"n": 1.5}, False),
    ({"n": 1, "extra": 0}, False),
    ({"n": 1, "inner": {"gib": 1}}, False),  # Inner is total: name is required (it may be null)
    ({"n": 1, "inner": {"gib": "1", "name": None}}, False),
    ({"n": 1, "rows": {}}, False),
    ({"n": 1, "by_name": {"a": "1"}}, False),
    ({"n": 1, "kind": "c"}, False),
    ({"n": 1, "pair": [1, "2"]}, False),
])
def test_typeddicts_accept_exactly_their_values(value, ok):
    assert _valid(Outer, value) is ok


def test_dataclasses_and_scalars():
    assert _valid(Point, {"x_s": 1.0, "label": "a"})
    assert not _valid(Point, {"x_s": 1.0})
    assert _valid(int | None, None) and not _valid(int | None, "1")
    assert _valid(list[tuple[int, ...]], [[1], []])
    with pytest.raises(TypeError):
        json_schema(set[complex], {})


def test_descriptions_units_and_the_reference_rows():
    defs: dict[str, Any] = {}
    json_schema(Outer, defs)
    assert defs["Outer"]["description"] == "An outer object."
    assert defs["Inner"]["properties"]["gib"] == {"type": "number", "description": "the size", "x-unit": "GiB (2**30 bytes)"}
    assert "description" not in defs["Inner"]["properties"]["name"]
    rows = field_rows(defs, "Outer")
    assert [r[0] for r in rows].count("Inner") == 2 and rows[0][:3] == ("Outer", "n", "integer")
    json_schema(Point, defs)
    assert defs["Point"]["properties"]["x_s"]["x-unit"] == "seconds"


@pytest.mark.parametrize("name, unit", [
    ("prompt_tokens_per_s", "tokens per second"), ("span_s", "seconds"), ("p99_ms", "milliseconds"),
    ("hit_tokens", "tokens"), ("usd_per_gb_hour", "US$ per GB-hour"), ("cost_usd", "US$"),
    ("routing_regret_percentage_points", "percentage points"), ("kv_gib_all_replicas", "GiB (2**30 bytes)"),
    ("state_bytes", "bytes"), ("name", ""), ("fits", ""),
])
def test_units_from_names(name, unit):
    assert unit_of(name) == unit


def test_an_output_schema_fixes_its_version_and_kind():
    schema = output_schema("x", "an output", Outer, 7, "x")
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"schema_version": 7, "kind": "x", "n": 1})
    assert not validator.is_valid({"schema_version": 6, "kind": "x", "n": 1})
    assert not validator.is_valid({"kind": "x", "n": 1})
    assert not validator.is_valid({"schema_version": 7, "kind": "y", "n": 1})
