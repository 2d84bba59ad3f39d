"""Suite converters: promptfoo, Orbit-style and Google ADK to native Suites."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format
from trajgrade.suite_formats import SuiteFormatError, detect, detect_and_convert, load
from trajgrade.v1 import assertion_pb2 as A  # noqa: N812 - short alias for many enum names
from trajgrade.v1 import suite_pb2


def _dict(suite: suite_pb2.Suite) -> dict[str, object]:
    return json_format.MessageToDict(suite, preserving_proto_field_name=True)


def test_promptfoo_assertions() -> None:
    suite = detect_and_convert(
        [
            {"type": "trajectory:tool-used", "value": ["lookup_*", "Update[seat]"]},
            {"type": "not-trajectory:tool-used", "value": "delete_*"},
            {"type": "trajectory:tool-used", "value": {"name": "search", "max": 3}},
            {
                "type": "trajectory:tool-args-match",
                "value": {"name": "update_seat", "args": {"seat": "14C"}, "ignore": "request_id"},
            },
            {
                "type": "not-trajectory:tool-args-match",
                "value": {
                    "pattern": "pay*",
                    "args": {"amount": 1},
                    "mode": "exact",
                    "defaults": {"currency": "EUR"},
                },
            },
            {"type": "trajectory:tool-sequence", "value": {"mode": "exact", "steps": ["a", "b"]}},
            {"type": "trajectory:step-count", "value": {"min": 2, "max": 5}},
            {"type": "trajectory:step-count", "value": {"pattern": "search*", "max": 2}},
        ]
    )
    got = _dict(suite)["assertions"]
    assert got[0] == {"tool_count": {"glob": "lookup_*", "ignore_case": True, "min": 1}}
    # promptfoo treats brackets literally: they are escaped in our glob.
    assert got[1]["tool_count"]["glob"] == "Update\\[seat\\]"
    assert got[2] == {"forbidden_tools": {"tools": ["delete_*"], "ignore_case": True}}
    assert got[3] == {"tool_count": {"glob": "search", "ignore_case": True, "min": 1, "max": 3}}
    assert got[4] == {
        "name": "trajectory:tool-args-match:update_seat",
        "tool_sequence": {
            "steps": [
                {
                    "glob": "update_seat",
                    "ignore_case": True,
                    "match": {
                        "mode": "MATCH_MODE_PARTIAL",
                        "args_json": '{"seat":"14C"}',
                        "ignore": ["request_id"],
                    },
                }
            ],
            "mode": "SEQUENCE_MODE_IN_ORDER",
        },
    }
    assert got[5]["negate"] is True
    assert got[5]["name"] == "not-trajectory:tool-args-match:pay*"
    assert got[5]["tool_sequence"]["steps"][0]["match"]["defaults_json"] == '{"currency":"EUR"}'
    assert got[6] == {
        "tool_sequence": {
            "steps": [{"glob": "a", "ignore_case": True}, {"glob": "b", "ignore_case": True}],
            "mode": "SEQUENCE_MODE_EXACT",
        }
    }
    assert got[7] == {"step_count": {"min": 2, "max": 5}}
    assert got[8] == {"tool_count": {"glob": "search*", "ignore_case": True, "max": 2}}


def test_promptfoo_unsupported_parts_are_listed() -> None:
    items = {
        "assert": [
            {"type": "contains", "value": "x"},
            {"type": "trajectory:tool-sequence", "value": {"steps": [["a", "b"]]}},
            {"type": "trajectory:step-count", "value": {"type": "message", "min": 1}},
            {
                "type": "trajectory:tool-args-match",
                "value": {"name": "f", "args": {}, "ignore": "*_id"},
            },
            {"type": "trajectory:tool-used", "value": "ok"},
        ]
    }
    with pytest.raises(SuiteFormatError) as raised:
        detect_and_convert(items)
    assert len(raised.value.problems) == 4
    suite = detect_and_convert(items, allow_unsupported=True)
    assert len(suite.assertions) == 1


def test_orbit_objects(tmp_path: Path) -> None:
    path = tmp_path / "orbit.json"
    path.write_text(
        '{"name": "refunds", "tool_call_args": {"issue_refund": {"amount_cents": 5000, '
        '"rate": 0.10000000000000001}}, "expected_tool_sequence": ["lookup", "issue_refund"], '
        '"allowed_tools": ["lookup", "issue_*"], "expected_tool_calls": ["lookup"]}'
    )
    obj = load(path)
    assert detect(obj) == "orbit"
    suite = detect_and_convert(obj)
    assert suite.name == "refunds"
    kinds = [a.WhichOneof("kind") for a in suite.assertions]
    assert kinds == ["tool_call_args", "tool_sequence", "allowed_tools", "tool_called"]
    args = suite.assertions[0].tool_call_args
    assert args.match.mode == A.MATCH_MODE_EXACT
    assert args.match.args_json == '{"amount_cents":5000,"rate":0.10000000000000001}'
    with pytest.raises(SuiteFormatError, match="not an Orbit trajectory key"):
        detect_and_convert({"allowed_tools": ["a"], "surprise": 1})


ADK_SET = {
    "eval_set_id": "home",
    "eval_cases": [
        {
            "eval_id": "case-1",
            "conversation": [
                {
                    "invocation_id": "i1",
                    "user_content": {"parts": [{"text": "on"}]},
                    "intermediate_data": {
                        "tool_uses": [
                            {
                                "id": "x",
                                "name": "set_device_info",
                                "args": {"location": "Bedroom", "status": "ON"},
                            }
                        ]
                    },
                },
                {
                    "invocation_id": "i2",
                    "user_content": {"parts": [{"text": "check"}]},
                    "intermediateData": {
                        "invocationEvents": [
                            {
                                "author": "agent",
                                "content": {
                                    "parts": [
                                        {"functionCall": {"name": "get_device_info", "args": {}}}
                                    ]
                                },
                            }
                        ]
                    },
                },
            ],
        },
        {"eval_id": "case-2", "conversation": [{"user_content": {}, "intermediate_data": {}}]},
    ],
}


@pytest.mark.parametrize(
    ("match_type", "mode"),
    [
        ("EXACT", A.TRAJECTORY_MODE_STRICT),
        ("in_order", A.TRAJECTORY_MODE_IN_ORDER),
        ("ANY_ORDER", A.TRAJECTORY_MODE_SUPERSET),
    ],
)
def test_adk_eval_set_with_config(match_type: str, mode: int) -> None:
    config = {
        "criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": match_type}}
    }
    assert detect(ADK_SET) == "adk"
    suite = detect_and_convert(ADK_SET, config=config, eval_id="case-1")
    [assertion] = suite.assertions
    assert assertion.name == "tool_trajectory_avg_score"
    match = assertion.trajectory_match
    assert match.mode == mode
    assert match.args == A.MATCH_MODE_EXACT
    assert [(c.name, c.arguments_json, c.turn) for c in match.reference] == [
        ("set_device_info", '{"location":"Bedroom","status":"ON"}', 1),
        ("get_device_info", "{}", 2),
    ]
    # Two invocations: ADK scores each on its own, so the match runs per turn.
    assert assertion.scope.per_turn


def test_adk_defaults_legacy_and_errors() -> None:
    with pytest.raises(SuiteFormatError, match="pass eval_id"):
        detect_and_convert(ADK_SET)
    empty = detect_and_convert(ADK_SET, eval_id="case-2")
    assert empty.assertions[0].step_count.max == 0  # EXACT with nothing expected
    legacy = [
        {
            "query": "q",
            "expected_tool_use": [{"tool_name": "f", "tool_input": {"a": 1}}],
            "reference": "r",
        }
    ]
    suite = detect_and_convert(
        legacy,
        config={
            "criteria": {
                "tool_trajectory_avg_score": {"threshold": 0.5, "ignore_args": True},
                "response_match_score": 0.8,
            }
        },
        allow_unsupported=True,
    )
    match = suite.assertions[0].trajectory_match
    assert match.args == A.MATCH_MODE_IGNORE
    assert suite.assertions[0].severity == A.SEVERITY_HARD  # one invocation: 0/1 scores
    with pytest.raises(SuiteFormatError, match="response_match_score"):
        detect_and_convert(
            legacy,
            config={"criteria": {"tool_trajectory_avg_score": 1.0, "response_match_score": 0.8}},
        )
    with pytest.raises(SuiteFormatError, match="no expected tool calls"):
        detect_and_convert({"criteria": {"tool_trajectory_avg_score": 1.0}})


def test_native_suite_passes_through() -> None:
    obj = {"name": "n", "assertions": [{"tool_called": {"tool": "a"}}]}
    assert detect(obj) == "native"
    assert detect_and_convert(obj).assertions[0].tool_called.tool == "a"
    with pytest.raises(SuiteFormatError):
        detect({"what": 1})
