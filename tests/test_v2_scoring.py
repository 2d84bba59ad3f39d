"""SPEC v2 §12 numeric `tolerance` and `trajectory_score` through the Python API
(`trajgrade.compile_suite(...).grade(trace)`): the worked examples 1 and 2 of §16, the
INVALID_ARGUMENT paths, and Hypothesis properties of the metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trajgrade
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.strategies import traces
from trajgrade.v1 import result_pb2

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PASS, FAIL = result_pb2.ASSERTION_STATUS_PASS, result_pb2.ASSERTION_STATUS_FAIL


def grade(assertion: dict[str, Any], calls: list[dict[str, Any]]) -> Any:
    suite = trajgrade.compile_suite({"assertions": [assertion]})
    return suite.grade({"id": "t", "calls": calls}).results[0]


def geo(args: str, tolerance: dict[str, Any], mode: str = "MATCH_MODE_SUBSET") -> dict[str, Any]:
    match = {"mode": mode, "args_json": args, "tolerance": tolerance}
    return {"tool_call_args": {"tool": "geo", "match": match}}


# ---- §16 example 1 ---------------------------------------------------------------------------


def test_example_1_tolerance() -> None:
    expected = '{"lat": 52.52, "lon": 13.405}'
    calls = [{"name": "geo", "arguments_json": '{"lat": 52.5201, "lon": 13.405}'}]
    r = grade(geo(expected, {"abs": 0.001}), calls)
    assert (r.status, list(r.positions)) == (PASS, [1])
    r = grade(geo(expected, {"abs": 0.00001}), calls)
    assert (r.status, r.reason_code) == (FAIL, "NO_MATCHING_CALL")
    assert r.reason.endswith("$.lat expected 52.52, got 52.5201")
    for tolerance in ({"abs": 10}, {"rel": 1e9}, {"abs": "Infinity"}):
        r = grade(geo('{"n": true}', tolerance), [{"name": "geo", "arguments_json": '{"n": 1}'}])
        assert r.reason_code == "NO_MATCHING_CALL", tolerance


# ---- §16 example 2 ---------------------------------------------------------------------------

REFERENCE = [{"name": n} for n in ("lookup_account", "check_refund_eligibility", "issue_refund")]


def score(names: list[str], metric: str = "SCORE_METRIC_F1", **options: Any) -> Any:
    spec = {"reference": REFERENCE, "args": "MATCH_MODE_IGNORE", "metric": metric, **options}
    return grade({"trajectory_score": spec}, [{"name": n} for n in names])


def test_example_2_trajectory_score() -> None:
    calls = ["lookup_account", "log_event", "issue_refund"]
    r = score(calls, min_score=0.6)
    assert (r.name, r.status, r.score, list(r.positions)) == (
        "trajectory_score",
        PASS,
        0.6667,
        [1, 3],
    )
    r = score(calls, min_score=0.9)
    assert (r.status, r.score, list(r.positions)) == (FAIL, 0.6667, [2])
    assert r.reason_code == "SCORE_BELOW_MIN"
    assert r.reason == (
        "score 0.6667 < 0.9: matched 2 of 3 reference calls; "
        "unmatched reference 2 check_refund_eligibility; extra call 2 log_event"
    )
    r = score(["issue_refund", "lookup_account"], "SCORE_METRIC_ORDERED_F1", min_score=0)
    assert (r.status, r.score) == (PASS, 0.4)


def test_trajectory_score_counts_in_mean_score() -> None:
    suite = trajgrade.compile_suite(
        {"assertions": [{"trajectory_score": {"reference": REFERENCE, "min_score": 0.5}}]}
    )
    calls = [{"name": n} for n in ("lookup_account", "log_event", "issue_refund")]
    result = suite.grade({"id": "t", "calls": calls})
    assert (result.verdict, result.score, result.mean_score) == (
        result_pb2.VERDICT_PASS,
        1.0,
        0.6667,
    )


# ---- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assertion", "field"),
    [
        (geo("{}", {"abs": -1}), "assertions[0].tool_call_args.match.tolerance.abs"),
        (geo("{}", {"rel": "NaN"}), "assertions[0].tool_call_args.match.tolerance.rel"),
        (
            geo("{}", {"abs": 1, "paths": ["a[0]"]}),
            "assertions[0].tool_call_args.match.tolerance.paths[0]",
        ),
        (
            {
                "tool_call_args": {
                    "tool": "g",
                    "match": {"mode": "MATCH_MODE_REGEX", "pattern": "x", "tolerance": {}},
                }
            },
            "assertions[0].tool_call_args.match.tolerance",
        ),
        (
            {
                "tool_sequence": {
                    "steps": [
                        {
                            "tool": "a",
                            "match": {"mode": "MATCH_MODE_IGNORE", "tolerance": {"abs": 1}},
                        }
                    ]
                }
            },
            "assertions[0].tool_sequence.steps[0].match.tolerance",
        ),
        (
            {
                "trajectory_match": {
                    "reference": [{"name": "a"}],
                    "overrides": [
                        {"tool": "a", "args": "MATCH_MODE_IGNORE", "tolerance": {"abs": 1}}
                    ],
                }
            },
            "assertions[0].trajectory_match.overrides[0].tolerance",
        ),
        (
            {"trajectory_score": {"reference": [{"name": "a"}], "min_score": 2}},
            "assertions[0].trajectory_score.min_score",
        ),
        (
            {"trajectory_score": {"reference": [{"name": "a"}], "min_score": "NaN"}},
            "assertions[0].trajectory_score.min_score",
        ),
        ({"trajectory_score": {"reference": []}}, "assertions[0].trajectory_score.reference"),
        (
            {"trajectory_score": {"reference": [{"name": "a"}], "args": "MATCH_MODE_REGEX"}},
            "assertions[0].trajectory_score.args",
        ),
    ],
)
def test_invalid_options_are_rejected_at_their_field(assertion: dict[str, Any], field: str) -> None:
    with pytest.raises(trajgrade.InvalidSuiteError) as info:
        trajgrade.compile_suite({"assertions": [assertion]})
    assert info.value.field == field


# ---- properties ------------------------------------------------------------------------------


def _result_bytes(suite: dict[str, Any], trace: dict[str, Any]) -> list[bytes] | None:
    """Every assertion result's bytes (the suite id differs with the suite's text)."""
    try:
        compiled = trajgrade.compile_suite(suite)
    except trajgrade.InvalidSuiteError:
        return None
    return [bytes(r.SerializeToString(deterministic=True)) for r in compiled.grade(trace).results]


@st.composite
def expectation(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A trace and expected arguments taken from (or near) one of its calls."""
    trace = draw(traces())
    texts = [c["arguments_json"] for c in trace["calls"] if c.get("arguments_json")]
    expected = draw(st.sampled_from(texts)) if texts else "{}"
    mode = draw(st.sampled_from(["MATCH_MODE_EXACT", "MATCH_MODE_SUBSET", "MATCH_MODE_PARTIAL"]))
    return trace, expected, mode


@SETTINGS
@given(expectation(), st.sampled_from([{}, {"abs": 0}, {"abs": 0, "rel": 0, "paths": ["x"]}]))
def test_zero_tolerance_is_v1_equality(
    case: tuple[dict[str, Any], str, str], zero: dict[str, Any]
) -> None:
    trace, expected, mode = case
    tool = trace["calls"][0]["name"] if trace["calls"] else "a"
    match = {"mode": mode, "args_json": expected}
    plain = {"tool_call_args": {"tool": tool, "match": match}}
    tolerant = {"tool_call_args": {"tool": tool, "match": {**match, "tolerance": zero}}}
    reference = [
        {k: c[k] for k in ("name", "arguments_json") if k in c} for c in trace["calls"][:4]
    ]
    reference = reference or [{"name": "a"}]
    trajectory = {"reference": reference, "mode": "TRAJECTORY_MODE_UNORDERED", "args": mode}
    overrides = [
        {"tool": r["name"], "tolerance": zero} for r in {r["name"]: r for r in reference}.values()
    ]
    pairs = [
        (plain, tolerant),
        (
            {"trajectory_match": trajectory},
            {"trajectory_match": {**trajectory, "overrides": overrides}},
        ),
    ]
    for v1, v2 in pairs:
        want = _result_bytes({"assertions": [v1]}, trace)
        assert want == _result_bytes({"assertions": [v2]}, trace)


NAMES = st.sampled_from(["a", "b", "c"])


@st.composite
def scored(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A reference and calls over few names, with an `x` argument that may have to match."""
    reference = [
        {
            "name": draw(NAMES),
            **({"arguments_json": json.dumps({"x": x})} if (x := draw(st.integers(0, 2))) else {}),
        }
        for _ in range(draw(st.integers(1, 6)))
    ]
    calls = [
        {"name": draw(NAMES), "arguments_json": json.dumps({"x": draw(st.integers(0, 2))})}
        for _ in range(draw(st.integers(0, 7)))
    ]
    return reference, calls


def _scores(reference: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, float]:
    metrics = ["F1", "PRECISION", "RECALL", "ORDERED_F1"]
    suite = trajgrade.compile_suite(
        {
            "assertions": [
                {
                    "name": m,
                    "trajectory_score": {
                        "reference": reference,
                        "metric": f"SCORE_METRIC_{m}",
                        "min_score": 0,
                    },
                }
                for m in metrics
            ]
        }
    )
    results = suite.grade({"id": "t", "calls": calls}).results
    assert all(r.status == PASS for r in results)
    return {r.name: r.score for r in results}


@SETTINGS
@given(scored())
def test_metric_properties(case: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    s = _scores(*case)
    p, r, f1 = s["PRECISION"], s["RECALL"], s["F1"]
    assert 0.0 <= p <= 1.0
    assert 0.0 <= r <= 1.0
    # F1 = 2m/(R+A) = 2PR/(P+R), 0 when m = 0; P and R are rounded to 4 places, so allow the
    # rounding error carried through the harmonic mean.
    harmonic = 0.0 if p + r == 0 else 2 * p * r / (p + r)
    assert abs(f1 - harmonic) <= 3e-4, (s, harmonic)
    assert s["ORDERED_F1"] <= f1
    for value in s.values():
        assert value == round(value, 4)
