"""SPEC v2 §11 `scope` and `per_turn` through the Python API: §16 example 3, the filters, and
metamorphic properties over generated traces and suites."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import trajgrade
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.strategies import cases
from trajgrade.v1 import result_pb2, trace_pb2

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PASS, FAIL = result_pb2.ASSERTION_STATUS_PASS, result_pb2.ASSERTION_STATUS_FAIL


def grade(assertion: dict[str, Any], trace: dict[str, Any] | trace_pb2.Trace) -> Any:
    return trajgrade.compile_suite({"assertions": [assertion]}).grade(trace)


def test_example_3_per_turn_tool_called() -> None:
    trace = trace_pb2.Trace(
        id="t",
        calls=[
            trace_pb2.ToolCall(name="get_order", turn=1),
            trace_pb2.ToolCall(name="reply", turn=1),
            trace_pb2.ToolCall(name="reply", turn=2),
        ],
    )
    result = grade({"tool_called": {"tool": "get_order"}, "scope": {"per_turn": True}}, trace)
    [r] = result.results
    assert r.status == FAIL
    assert r.reason.startswith("turn 2: ")
    assert r.reason_code == "TOOL_NOT_CALLED"
    assert r.score == 0.5
    assert result.mean_score == 0.5
    assert result.score == 0.0
    assert result.verdict == result_pb2.VERDICT_FAIL


AGENTS = ["", "triage", "triage/billing", "triage/billing/refunds", "support"]


def test_agent_glob_sees_sub_agents_and_positions_stay_the_traces() -> None:
    trace = {"calls": [{"name": "a", "agent": agent} for agent in AGENTS]}

    def counted(agent: str) -> list[int]:
        r = grade({"tool_count": {"glob": "*", "min": 0}, "scope": {"agent": agent}}, trace)
        return list(r.results[0].positions)

    assert counted("triage/*") == [3, 4]
    assert counted("triage") == [2]
    assert counted("TRIAGE") == []


def test_server_glob_and_the_closest_call_by_its_trace_position() -> None:
    trace = {
        "calls": [
            {"name": "search", "server": "web"},
            {"name": "refund", "server": "mcp-pay", "arguments_json": '{"amount": 500}'},
        ]
    }
    match = {"mode": "MATCH_MODE_SUBSET", "args_json": '{"amount": 5000}'}
    r = grade(
        {"tool_call_args": {"tool": "refund", "match": match}, "scope": {"server": "mcp-*"}},
        trace,
    ).results[0]
    assert (r.reason_code, list(r.positions)) == ("NO_MATCHING_CALL", [2])
    assert "closest is call 2: $.amount expected 5000, got 500" in r.reason
    r = grade({"step_count": {"max": 0}, "scope": {"server": "web"}}, trace).results[0]
    assert r.reason == "the scope has 1 call(s); at most 0 allowed"


def test_a_single_turn_grades_its_own_answer_and_model_calls() -> None:
    trace = {
        "calls": [
            {"name": "lookup", "turn": 1, "result": "costs 12.50", "agent": "billing"},
            {"name": "lookup", "turn": 2, "result": "costs 99.00"},
        ],
        "turns": [{"final_answer": "It costs 12.50."}, {"final_answer": "It costs 99.00."}],
        "final_answer": "It costs 99.00.",
        "model_calls": [
            {"model": "big", "input_tokens": 25000, "output_tokens": 5000},
            {"model": "small", "input_tokens": 10000, "output_tokens": 2000, "agent": "billing"},
            {"model": "small", "input_tokens": 1, "output_tokens": 1, "turn": 2},
        ],
    }
    turn_1 = {"turn": 1}
    assert grade({"grounding": {"numbers": True}, "scope": turn_1}, trace).verdict == (
        result_pb2.VERDICT_PASS
    )
    expr = "answer == 'It costs 12.50.' && size(calls) == 1 && usage.total_tokens == 42000"
    assert grade({"expression": {"expr": expr}, "scope": turn_1}, trace).results[0].status == PASS
    expr = "size(model_calls) == 1 && usage.total_tokens == 12000 && calls[0].position == 1"
    by_agent = {"agent": "billing"}
    assert grade({"expression": {"expr": expr}, "scope": by_agent}, trace).results[0].status == PASS
    # Each turn against its own answer; swapped answers fail both.
    per_turn = {"grounding": {"numbers": True}, "scope": {"per_turn": True}}
    assert grade(per_turn, trace).results[0].score == 1.0
    swapped = {**trace, "turns": trace["turns"][::-1]}
    r = grade(per_turn, swapped).results[0]
    assert (r.status, r.score, r.reason[:8]) == (FAIL, 0.0, "turn 1: ")


def test_turn_with_per_turn_is_rejected_at_the_scope() -> None:
    bad = {"tool_called": {"tool": "a"}, "scope": {"turn": 1, "per_turn": True}}
    with pytest.raises(trajgrade.InvalidSuiteError) as e:
        trajgrade.compile_suite({"assertions": [bad]})
    assert e.value.field == "assertions[0].scope"
    assert [f for f, _ in e.value.problems] == ["assertions[0].scope"]


def _same_outcome(a: Any, b: Any) -> None:
    """Two results that must agree; reasons may differ in "the scope" / "the trace"."""
    assert (a.name, a.status, a.severity, a.reason_code) == (
        b.name,
        b.status,
        b.severity,
        b.reason_code,
    )
    assert list(a.positions) == list(b.positions)
    assert a.score == b.score


def _with_scope(suite: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    scoped = copy.deepcopy(suite)
    for a in scoped["assertions"]:
        a["scope"] = scope
    return scoped


def _valid(suite: dict[str, Any]) -> trajgrade.CompiledSuite | None:
    try:
        return trajgrade.compile_suite(suite)
    except trajgrade.InvalidSuiteError:
        return None


@SETTINGS
@given(cases(), st.lists(st.sampled_from([0, 1]), min_size=6, max_size=6))
def test_per_turn_over_a_single_turn_equals_the_unscoped_assertion(
    case: tuple[dict[str, Any], dict[str, Any]], turns: list[int]
) -> None:
    suite, trace = case
    # One turn, whether recorded as 1 or not recorded (0).
    trace = {
        **trace,
        "calls": [{**c, "turn": t} for c, t in zip(trace["calls"], turns, strict=False)],
    }
    plain, per_turn = _valid(suite), _valid(_with_scope(suite, {"per_turn": True}))
    assert (plain is None) == (per_turn is None)
    if plain is None or per_turn is None:
        return
    got, want = per_turn.grade(trace), plain.grade(trace)
    for g, w in zip(got.results, want.results, strict=True):
        _same_outcome(g, w)
        assert g.reason.startswith("turn 1: ") or g.status == PASS
    assert (got.verdict, got.score, got.mean_score) == (want.verdict, want.score, want.mean_score)


@SETTINGS
@given(cases(), st.lists(st.sampled_from(AGENTS), min_size=6, max_size=6))
def test_scoping_by_an_agent_no_call_has_gives_what_an_empty_trace_gives(
    case: tuple[dict[str, Any], dict[str, Any]], agents: list[str]
) -> None:
    suite, trace = case
    trace = {
        **trace,
        "calls": [{**c, "agent": a} for c, a in zip(trace["calls"], agents, strict=False)],
    }
    scoped = _valid(_with_scope(suite, {"agent": "nobody"}))
    plain = _valid(suite)
    if scoped is None or plain is None:
        return
    empty = {k: v for k, v in trace.items() if k != "calls"}
    got, want = scoped.grade(trace), plain.grade(empty)
    for g, w in zip(got.results, want.results, strict=True):
        _same_outcome(g, w)


@SETTINGS
@given(cases(), st.lists(st.sampled_from(AGENTS), min_size=6, max_size=6))
def test_a_scope_every_call_passes_changes_nothing(
    case: tuple[dict[str, Any], dict[str, Any]], agents: list[str]
) -> None:
    suite, trace = case
    trace = {
        **trace,
        "calls": [{**c, "agent": a} for c, a in zip(trace["calls"], agents, strict=False)],
    }
    scoped = _valid(_with_scope(suite, {"agent": "*", "server": "*"}))
    plain = _valid(suite)
    if scoped is None or plain is None:
        return
    for g, w in zip(scoped.grade(trace).results, plain.grade(trace).results, strict=True):
        _same_outcome(g, w)


def test_per_turn_trajectory_score_scores_each_turn_against_its_reference_calls() -> None:
    """per_turn around trajectory_score (§11): turn k's calls against the reference calls of turn
    k; the score is the mean of the turns' F1; a turn below min_score fails the result."""
    trace = {
        "id": "t",
        "calls": [
            {"name": "a", "turn": 1},
            {"name": "x", "turn": 1},
            {"name": "c", "turn": 2},
        ],
    }
    reference = [{"name": "a", "turn": 1}, {"name": "b", "turn": 1}, {"name": "c", "turn": 2}]
    scored = {"trajectory_score": {"reference": reference, "min_score": 0}}
    [r] = grade({**scored, "scope": {"per_turn": True}}, trace).results
    # Turn 1: [a, x] against [a, b], m = 1, F1 = 2/4; turn 2: [c] against [c], F1 = 1.
    assert (r.status, r.score, list(r.positions)) == (PASS, 0.75, [1, 3])
    strict = {"trajectory_score": {"reference": reference, "min_score": 0.6}}
    [r] = grade({**strict, "scope": {"per_turn": True}}, trace).results
    assert r.status == FAIL and r.reason_code == "SCORE_BELOW_MIN"
    assert r.reason.startswith("turn 1: score 0.5 < 0.6: matched 1 of 2 reference calls")
    assert (r.score, list(r.positions)) == (0.75, [2])
    # Unscoped, the same calls and reference score 2*2/(3+3).
    [whole] = grade(strict, trace).results
    assert (whole.status, whole.score) == (PASS, 0.6667)
