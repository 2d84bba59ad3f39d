"""Metamorphic properties of the core, over generated traces and suites."""

from __future__ import annotations

import copy
from typing import Any

import trajgrade
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.strategies import cases, traces
from trajgrade.v1 import result_pb2, trace_pb2

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid(suite: dict[str, Any]) -> trajgrade.CompiledSuite | None:
    try:
        return trajgrade.compile_suite(suite)
    except trajgrade.InvalidSuiteError:
        return None


@SETTINGS
@given(cases())
def test_negation_flips_status(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    suite, trace = case
    for a in suite["assertions"]:
        a.pop("name", None)
    flipped = copy.deepcopy(suite)
    for a in flipped["assertions"]:
        a["negate"] = not a.get("negate", False)
    base, neg = _valid(suite), _valid(flipped)
    assert (base is None) == (neg is None)
    if base is None or neg is None:
        return
    for r, n in zip(base.grade(trace).results, neg.grade(trace).results, strict=True):
        assert r.status != n.status
        assert r.severity == n.severity
        assert list(r.positions) == list(n.positions)
        assert n.name == (r.name[len("not:") :] if r.name.startswith("not:") else "not:" + r.name)


@st.composite
def permuted(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    trace = draw(traces())
    return trace, {**trace, "calls": draw(st.permutations(trace["calls"]))}


def _unordered_suite(trace: dict[str, Any]) -> dict[str, Any]:
    calls = trace["calls"] or [{"name": "a"}]
    steps = [{"tool": c["name"]} for c in calls[:3]]
    with_args = [
        {
            "tool": c["name"],
            "match": {"mode": "MATCH_MODE_PARTIAL", "args_json": c["arguments_json"]},
        }
        for c in calls[:3]
        if "arguments_json" in c
    ]
    refs = [{"name": c["name"]} for c in calls[:4]]
    assertions: list[dict[str, Any]] = [
        {"tool_sequence": {"steps": steps, "mode": "SEQUENCE_MODE_ANY_ORDER"}},
        {"trajectory_match": {"reference": refs, "mode": "TRAJECTORY_MODE_UNORDERED"}},
        {"trajectory_match": {"reference": refs, "mode": "TRAJECTORY_MODE_SUPERSET"}},
    ]
    if with_args:
        assertions.append(
            {"tool_sequence": {"steps": with_args, "mode": "SEQUENCE_MODE_ANY_ORDER"}}
        )
    return {"assertions": assertions}


@SETTINGS
@given(permuted())
def test_unordered_modes_invariant_under_permutation(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    trace, shuffled = pair
    suite = _valid(_unordered_suite(trace))
    if suite is None:  # a call's arguments are not valid JSON as an expectation
        return
    for r, s in zip(suite.grade(trace).results, suite.grade(shuffled).results, strict=True):
        assert (r.name, r.status, r.reason_code) == (s.name, s.status, s.reason_code)
        assert len(r.positions) == len(s.positions) or r.status == result_pb2.ASSERTION_STATUS_FAIL


@SETTINGS
@given(traces(), st.sampled_from(["MATCH_MODE_EXACT", "MATCH_MODE_PARTIAL", "MATCH_MODE_IGNORE"]))
def test_own_calls_as_strict_reference_pass(trace: dict[str, Any], args: str) -> None:
    if not trace["calls"]:
        return
    reference = []
    for c in trace["calls"]:
        ref = {"name": c["name"]}
        if "arguments_json" in c:
            ref["arguments_json"] = c["arguments_json"]
        reference.append(ref)
    suite = _valid({"assertions": [{"trajectory_match": {"reference": reference, "args": args}}]})
    if suite is None:  # some call's text is not valid JSON, so it cannot be a reference
        return
    result = suite.grade(trace)
    assert result.verdict == result_pb2.VERDICT_PASS
    assert list(result.results[0].positions) == list(range(1, len(trace["calls"]) + 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(traces(), min_size=1, max_size=20))
def test_same_bytes_on_every_thread_count(
    case: tuple[dict[str, Any], dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    suite, trace = case
    payloads = [trajgrade.trace_bytes(t) for t in [trace, *more]] + [
        trace_pb2.Trace(id="x").SerializeToString(),
        b"\xff",
    ]
    outputs = []
    for threads in (1, 4):
        grader = trajgrade.Grader(threads=threads)
        try:
            compiled = grader.compile_suite(trajgrade.load_suite(suite).SerializeToString())
        except trajgrade.InvalidSuiteError:
            return
        outputs.append(compiled.grade_batch(payloads * 3))
    assert outputs[0] == outputs[1]
