"""ADK eval cases with several invocations: per-turn trajectory matches and turn traces.

ADK's `tool_trajectory_avg_score` scores each invocation 1 or 0 and averages; the converted
`trajectory_match` runs per turn (SPEC §11), its score the mean over the turns.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from trajgrade import compile_suite
from trajgrade.suite_formats import adk
from trajgrade.v1 import assertion_pb2, result_pb2, trace_pb2

A = assertion_pb2


def _invocation(number: int, user: str, answer: str, uses: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "invocation_id": f"e-{number}",
        "user_content": {"role": "user", "parts": [{"text": user}]},
        "final_response": {"role": "model", "parts": [{"text": answer}]},
        "intermediate_data": {
            "tool_uses": uses,
            "tool_responses": [],
            "intermediate_responses": [],
        },
    }


LIGHTS_ON = {"id": "a", "name": "set_device_info", "args": {"location": "Bedroom", "on": True}}
STATUS = {"id": "b", "name": "get_device_info", "args": {"location": "Bedroom"}}
CASE = {
    "eval_id": "two_turns",
    "conversation": [
        _invocation(1, "Bedroom lights on", "They are on.", [LIGHTS_ON]),
        _invocation(2, "Are they on?", "Yes.", [STATUS]),
        # A turn with nothing to call: per_turn skips it (neither calls nor reference calls).
        _invocation(3, "Thanks", "You're welcome.", []),
    ],
}
CONFIG = {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "EXACT"}}}


def test_several_invocations_give_a_per_turn_match_with_turned_references() -> None:
    conversion = adk.convert(CASE, config=CONFIG)
    [assertion] = conversion.suite.assertions
    assert assertion.name == "tool_trajectory_avg_score"
    assert assertion.scope == A.Scope(per_turn=True)
    assert assertion.severity == A.SEVERITY_HARD
    match = assertion.trajectory_match
    assert match.mode == A.TRAJECTORY_MODE_STRICT
    assert [(c.name, c.turn) for c in match.reference] == [
        ("set_device_info", 1),
        ("get_device_info", 2),
    ]
    # A threshold below 1 accepts ADK averages below 1: reported (SOFT), not fatal.
    soft = {"criteria": {"tool_trajectory_avg_score": {"threshold": 0.5}}}
    assert adk.convert(CASE, config=soft).suite.assertions[0].severity == A.SEVERITY_SOFT


def test_one_invocation_keeps_the_unscoped_match() -> None:
    case = {"eval_id": "one", "conversation": [CASE["conversation"][0]]}
    [assertion] = adk.convert(case).suite.assertions
    assert not assertion.HasField("scope")
    assert [c.turn for c in assertion.trajectory_match.reference] == [0]


def test_legacy_turns_are_invocations() -> None:
    legacy = [
        {"query": "on", "expected_tool_use": [{"tool_name": "set_device_info", "tool_input": {}}]},
        {"query": "status", "expected_tool_use": [{"tool_name": "get_device_info"}]},
    ]
    [assertion] = adk.convert(legacy).suite.assertions
    assert assertion.scope.per_turn
    assert [c.turn for c in assertion.trajectory_match.reference] == [1, 2]


def test_conversation_trace_has_the_turns() -> None:
    trace = adk.conversation_trace(CASE)
    assert trace.id == "two_turns"
    assert [(c.name, c.turn, c.arguments_json) for c in trace.calls] == [
        ("set_device_info", 1, '{"location":"Bedroom","on":true}'),
        ("get_device_info", 2, '{"location":"Bedroom"}'),
    ]
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        ("Bedroom lights on", "They are on."),
        ("Are they on?", "Yes."),
        ("Thanks", "You're welcome."),
    ]
    assert trace.final_answer == "You're welcome."


def _run(*calls: tuple[str, dict[str, Any], int]) -> trace_pb2.Trace:
    trace = adk.conversation_trace(CASE)
    del trace.calls[:]
    for name, args, turn in calls:
        trace.calls.add(name=name, arguments_json=_json(args), turn=turn)
    return trace


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


ON = ("set_device_info", {"location": "Bedroom", "on": True}, 1)
ASK = ("get_device_info", {"location": "Bedroom"}, 2)


@pytest.mark.parametrize(
    ("calls", "passed", "score", "reason_start"),
    [
        # The recorded run itself: every turn matches.
        ((ON, ASK), True, 1.0, ""),
        # Turn 2 made no call: ADK scores 1 and 0, average 0.5.
        ((ON,), False, 0.5, "turn 2: "),
        # The same calls, both in turn 1: over the whole run they match, per invocation not.
        ((ON, (ASK[0], ASK[1], 1)), False, 0.0, "turn 1: "),
    ],
)
def test_per_turn_grading_gives_adks_average(
    calls: tuple[tuple[str, dict[str, Any], int], ...],
    passed: bool,
    score: float,
    reason_start: str,
) -> None:
    suite = compile_suite(adk.convert(CASE, config=CONFIG).suite)
    result = suite.grade(_run(*calls))
    [outcome] = result.results
    assert (outcome.status == result_pb2.ASSERTION_STATUS_PASS) == passed
    assert outcome.score == score
    assert outcome.reason.startswith(reason_start)
    assert result.mean_score == score


def test_a_run_that_stops_after_turn_1_is_graded_on_turn_1_only() -> None:
    # Divergence 2 (docs/suite-formats.md): turns after the run's last are not evaluated.
    trace = _run(ON)
    del trace.turns[1:]
    [outcome] = compile_suite(adk.convert(CASE, config=CONFIG).suite).grade(trace).results
    assert outcome.status == result_pb2.ASSERTION_STATUS_PASS
    assert outcome.score == 1.0


def test_conversation_must_be_a_list() -> None:
    broken = copy.deepcopy(CASE)
    broken["conversation"] = {"not": "a list"}
    with pytest.raises(adk.SuiteFormatError, match="conversation"):
        adk.conversation_trace(broken)
