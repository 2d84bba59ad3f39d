"""Differential tests: the Rust core (through the public API) against the reference model."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import InvalidSuiteError, compile_suite
from reference.conformance import result_dict
from reference.strategies import broken_suites, cases, js_regex, traces

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(suite: dict[str, Any], trace: dict[str, Any]) -> None:
    try:
        ref = compile_suite(suite)
    except InvalidSuiteError as exc:
        with pytest.raises(trajgrade.InvalidSuiteError) as info:
            trajgrade.compile_suite(suite)
        assert info.value.field == exc.field
        return
    expected = ref.grade(trace)
    got = result_dict(trajgrade.compile_suite(suite).grade(trace))
    assert got == expected


@SETTINGS
@given(cases())
def test_core_matches_reference(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    check(*case)


@SETTINGS
@given(traces())
def test_args_exact_against_each_call(trace: dict[str, Any]) -> None:
    """Every call's own text as an EXACT / PARTIAL expectation, against every call."""
    texts = [c["arguments_json"] for c in trace["calls"] if "arguments_json" in c]
    for text in texts[:3]:
        suite = {
            "assertions": [
                {"tool_call_args": {"tool": t, "match": {"mode": mode, "args_json": text}}}
                for t in ("a", "b", "search")
                for mode in ("MATCH_MODE_EXACT", "MATCH_MODE_PARTIAL")
            ]
        }
        check(suite, trace)


@SETTINGS
@given(broken_suites())
def test_invalid_suites_name_the_same_field(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    check(*case)


@SETTINGS
@given(js_regex(), st.sampled_from(["", "i", "m", "s", "u", "im", "su"]), traces())
def test_regex_matches_like_the_reference(pattern: str, flags: str, trace: dict[str, Any]) -> None:
    match = {"mode": "MATCH_MODE_REGEX", "pattern": pattern}
    if flags:
        match["flags"] = flags
    suite = {
        "assertions": [
            {"tool_call_args": {"tool": t, "quantifier": q, "match": match}}
            for t in ("a", "b", "search")
            for q in ("QUANTIFIER_ANY", "QUANTIFIER_ALL")
        ]
    }
    check(suite, trace)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(traces(), max_size=8))
def test_batch_equals_one_by_one(
    case: tuple[dict[str, Any], dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    suite, trace = case
    try:
        compiled = trajgrade.compile_suite(suite)
    except trajgrade.InvalidSuiteError:
        return
    batch = [trace, *more]
    assert compiled.grade_batch(batch) == [compiled.grade(t) for t in batch]
