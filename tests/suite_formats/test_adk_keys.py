"""ADK eval sets: every key ADK's models define loads; any other key, or a case or invocation
that is not an object, is an error naming its source path, or a listed warning when
unsupported parts may be left out."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import seeds
from trajgrade import InvalidSuiteError, compile_suite, load_suite, load_suites
from trajgrade.cli import main
from trajgrade.v1.result_pb2 import VERDICT_FAIL, VERDICT_PASS

LIGHT = {"id": "adk-1", "name": "set_device_info", "args": {"location": "Bedroom", "on": False}}
# Shaped as ADK writes an eval set (`adk eval` / the web UI), with every optional key set.
REAL = {
    "eval_set_id": "home_automation",
    "name": "home automation",
    "description": "lights",
    "creation_timestamp": 1747337309.27,
    "eval_cases": [
        {
            "eval_id": "lights_off",
            "creation_timestamp": 1747337309.27,
            "session_input": {"app_name": "home", "user_id": "u", "state": {}},
            "final_session_state": {"lights": "off"},
            "rubrics": [],
            "conversation": [
                {
                    "invocation_id": "e-1",
                    "user_content": {"role": "user", "parts": [{"text": "Lights off"}]},
                    "final_response": {"role": "model", "parts": [{"text": "Done."}]},
                    "intermediate_data": {
                        "tool_uses": [LIGHT],
                        "tool_responses": [{"id": "adk-1", "name": "set_device_info"}],
                        "intermediate_responses": [],
                    },
                    "creation_timestamp": 1747337309.27,
                    "rubrics": [],
                    "app_details": None,
                }
            ],
        },
        {
            "eval_id": "greeting",
            "conversation": [{"user_content": {"parts": [{"text": "hi"}]}}],
        },
    ],
}
GOOD = seeds.trace([("set_device_info", {"location": "Bedroom", "on": False})])
BAD = seeds.trace([("set_device_info", {"location": "Kitchen", "on": False})])


def _camel(value: Any) -> Any:
    # EvalCase, Invocation and IntermediateData take camelCase aliases (EvalBaseModel).
    if isinstance(value, dict):
        return {
            (k if k in {"eval_set_id", "eval_cases", "args"} else _camel_key(k)): _camel(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.mark.parametrize("shape", ["snake", "camel"])
def test_a_real_eval_set_with_every_adk_key_loads(shape: str) -> None:
    source = REAL if shape == "snake" else _camel(REAL)
    found = load_suites(source)
    assert found.skipped == []
    assert list(found.suites) == ["lights_off", "greeting"]
    suite = compile_suite(found.suites["lights_off"])
    assert (suite.grade(GOOD).verdict, suite.grade(BAD).verdict) == (VERDICT_PASS, VERDICT_FAIL)


def _typos() -> dict[str, Any]:
    source = copy.deepcopy(REAL)
    source["eval_set_ide"] = "x"
    case = source["eval_cases"][1]
    case["sesion_input"] = {}
    invocation = case["conversation"][0]
    invocation["expected_tool_uze"] = [{"name": "greet"}]
    invocation["intermediate_data"] = {"tool_usez": [{"name": "greet"}]}
    return source


def test_unknown_keys_are_errors_naming_their_path_or_listed_warnings() -> None:
    where = "eval_cases[1].conversation[0]"
    expected = [
        ("eval_set_ide", "unknown key; expected eval_set_id, name, description, eval_cases, "
         "creation_timestamp"),
        ("eval_cases[1].sesion_input", "unknown key; expected eval_id, conversation, "
         "conversation_scenario, session_input, creation_timestamp, rubrics, final_session_state"),
        (f"{where}.expected_tool_uze", "unknown key; expected invocation_id, user_content, "
         "final_response, intermediate_data, creation_timestamp, rubrics, app_details"),
        (f"{where}.intermediate_data.tool_usez", "unknown key; expected tool_uses, "
         "tool_responses, intermediate_responses, invocation_events"),
    ]  # fmt: skip
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(_typos())
    assert raised.value.problems == expected
    # Left out: each is listed; the other case is unchanged.
    found = load_suites(_typos(), allow_unsupported=True)
    assert found.skipped == [f"{field}: {message}" for field, message in expected]
    assert found.suites == load_suites(REAL).suites


def test_cases_and_invocations_that_are_not_objects_are_listed_never_dropped() -> None:
    source = copy.deepcopy(REAL)
    source["eval_cases"].append("lights_on")
    source["eval_cases"][0]["conversation"].append(None)
    problems = [
        ("eval_cases[2]", "an eval case must be an object (left out)"),
        ("eval_cases[0].conversation[1]", "an invocation must be an object (left out)"),
    ]
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(source)
    assert raised.value.problems == problems
    found = load_suites(source, allow_unsupported=True)
    assert found.skipped == [f"{field}: {message}" for field, message in problems]
    assert found.suites == load_suites(REAL).suites
    # A case whose only invocation is not an object has nothing to grade: always an error.
    source["eval_cases"][1]["conversation"] = [7]
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(source, allow_unsupported=True)
    assert raised.value.field == "eval_cases[1].conversation"


def test_grade_cli_skip_unsupported_lists_unknown_adk_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = {"eval_id": "lights_off", "conversation": [REAL["eval_cases"][0]["conversation"][0]]}
    source["conversation"][0] = source["conversation"][0] | {"expected_tool_uze": []}
    path = tmp_path / "lights.evalset.json"
    path.write_text(json.dumps(source), encoding="utf-8")
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(GOOD), encoding="utf-8")
    argv = ["grade", "--suite", str(path), "--trace", str(trace), "--json"]
    assert main(argv) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["field"] == "conversation[0].expected_tool_uze"
    assert main([*argv, "--skip-unsupported"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == "VERDICT_PASS"
    assert "conversation[0].expected_tool_uze: unknown key" in captured.err


LEGACY = [
    {
        "query": "Turn off the bedroom light",
        "expected_tool_use": [
            {"tool_name": "get_device_info", "tool_input": {}, "mock_tool_output": "on"},
            {"tool_name": "set_device_info", "tool_input": {"location": "Bedroom", "on": False}},
        ],
        "expected_intermediate_agent_responses": [],
        "reference": "Done.",
    }
]


def test_legacy_test_json_keys_are_checked_at_their_source_path() -> None:
    suite = compile_suite(LEGACY)
    both = seeds.trace([("get_device_info", {}), ("set_device_info", LIGHT["args"])])
    assert suite.grade(both).verdict == VERDICT_PASS
    assert suite.grade(GOOD).verdict == VERDICT_FAIL
    broken = copy.deepcopy(LEGACY)
    broken[0]["refrence"] = "Done."
    turn = ("[0].refrence", "unknown key; expected query, expected_tool_use, "
            "expected_intermediate_agent_responses, reference, response")  # fmt: skip
    with pytest.raises(InvalidSuiteError) as raised:
        load_suite(broken)
    assert raised.value.problems == [turn]
    assert load_suites(broken, allow_unsupported=True).skipped == [": ".join(turn)]
    uses = broken[0]["expected_tool_use"]
    uses[1].pop("tool_name")
    uses[0]["tool_args"] = uses[0].pop("tool_input")
    for allow in (False, True):  # leaving out a call or its arguments changes the trajectory
        with pytest.raises(InvalidSuiteError) as raised:
            load_suite(broken, allow_unsupported=allow)
        assert raised.value.problems == [
            ("[0].expected_tool_use[0].tool_args",
             "unknown key; expected tool_name, tool_input, mock_tool_output"),
            ("[0].expected_tool_use[1].tool_name", "a tool use needs a name, got None"),
        ]  # fmt: skip
