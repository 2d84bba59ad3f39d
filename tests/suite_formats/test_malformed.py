"""Malformed suites of every format are InvalidSuiteError naming a field, never another error.

The first cases were found by mutating the seed examples; the property test keeps looking.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trajgrade import InvalidSuiteError
from trajgrade.suites import import_text, load_suites

FOUND = [
    ([{"query": "q", "expected_tool_use": [True]}], "[0].expected_tool_use[0]"),
    ([{"query": "q", "expected_tool_use": 1.5}], "[0].expected_tool_use"),
    ({"eval_set_id": "s", "eval_cases": 10**30}, "eval_cases"),
    (
        {"eval_id": "a", "conversation": [{"intermediate_data": -1}]},
        "conversation[0].intermediate_data",
    ),
    ({"eval_id": "a", "conversation": -1}, "conversation"),
    (
        {"tool_call_args": [{"tool": "f", "match": {"mode": [], "pattern": "x"}}]},
        "tool_call_args[0].match.mode",
    ),
    (
        {"tool_call_args": [{"tool": "f", "args": {}, "call_index": 10**30}]},
        "tool_call_args[0].call_index",
    ),
    (
        {
            "assert": [
                {
                    "type": "trajectory:tool-args-match",
                    "value": {"name": "f", "args": {}, "ignore": 1},
                }
            ]
        },
        "assert[0]",
    ),
    ({"assert": [{"type": "trajectory:step-count", "value": {"max": 2**40}}]}, "assert[0]"),
]


@pytest.mark.parametrize(("source", "field"), FOUND)
def test_found_shapes_are_invalid_suite_errors(source: Any, field: str) -> None:
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(source)
    assert raised.value.field == field, raised.value.problems


KEYS = st.sampled_from(
    [
        "tool_call_args", "expected_tool_sequence", "allowed_tools", "expected_tool_calls",
        "tool", "match", "mode", "args", "pattern", "flags", "call_index", "steps",
        "assert", "type", "value", "name", "min", "max", "description", "tests", "defaultTest",
        "eval_cases", "eval_id", "conversation", "intermediate_data", "tool_uses",
        "expected_tool_use", "tool_name", "tool_input", "assertions", "ignore", "defaults",
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from(
        [
            "exact",
            "subset",
            "regex",
            "trajectory:tool-used",
            "not-trajectory:tool-sequence",
            "trajectory:tool-args-match",
            "trajectory:step-count",
            "f",
            "*",
            "",
            "in_order",
        ]
    ),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(JSON, st.booleans())
def test_any_shape_converts_or_is_an_invalid_suite_error(value: Any, allow: bool) -> None:
    try:
        import_text(json.dumps(value), allow_unsupported=allow)
    except InvalidSuiteError as exc:
        assert exc.field
