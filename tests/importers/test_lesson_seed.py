"""The rule-based trajectory lesson: its three runs, in its own message shape, imported with
`trajgrade import`, graded against its rules as a native suite, give the lesson's printed outcomes.

The runs, the rules and the printed lines are read from spec/seeds/rule-based-trajectory-lesson.md
at test time; the lesson's own `check_trajectory` is run too, so the test also checks that what
it reads out of the seed is what the lesson prints.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from trajgrade import compile_suite
from trajgrade.cli import main
from trajgrade.importers import openai
from trajgrade.v1 import assertion_pb2, result_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite_formats"))
import seeds

LESSON = "rule-based-trajectory-lesson.md"
CHECKER = seeds.between(
    LESSON,
    '"""Rule-based trajectory checks over a mini_agent message list."""',
    "trajectory_demo.py",
)
DEMO = seeds.between(LESSON, "import json", "for name, msgs in", after="trajectory_demo.py")
PRINTED = re.compile(
    r"^(careful|lucky guess|wasteful)\s+pass=(True|False)\s+hard=(\[.*?\]) soft=(\[.*\])$"
)

# The lesson's RULES as a suite: required, forbidden, order pairs, argument rules (each
# over every call of the tool, vacuous when it was not called), redundancy, efficiency, grounding.
SUITE = {
    "name": "lesson-06",
    "assertions": [
        {"name": "missing required call get_order", "tool_called": {"tool": "get_order"}},
        {
            "name": "forbidden call delete_customer",
            "forbidden_tools": {"tools": ["delete_customer"]},
        },
        {
            "name": "issue_refund happened without a prior get_order",
            "order": {"before": "get_order", "after": "issue_refund"},
        },
        {
            "name": "refund targeted the wrong order",
            "expression": {
                "expr": "calls.all(c, c.name != 'issue_refund' || "
                "(has(c.args.order_id) && c.args.order_id == 'A-7'))"
            },
        },
        {
            "name": "refund exceeds the order amount",
            "expression": {
                "expr": "calls.all(c, c.name != 'issue_refund' || !has(c.args.amount) || "
                "c.args.amount <= 49.0)"
            },
        },
        {"name": "repeated call", "no_repeated_calls": {}},
        {"name": "calls vs reference", "efficiency": {"reference_steps": 2, "max_ratio": 1.5}},
        {"name": "ungrounded number", "grounding": {"values": ["49.00"]}},
    ],
}


def _demo() -> dict[str, Any]:
    """The lesson's demo module up to its print loop, with the lesson's own checker."""
    checker = types.ModuleType("trajectory")
    exec(compile(CHECKER, "trajectory.py", "exec"), checker.__dict__)
    namespace: dict[str, Any] = {}
    sys.modules["trajectory"] = checker
    try:
        exec(compile(DEMO, "trajectory_demo.py", "exec"), namespace)
    finally:
        del sys.modules["trajectory"]
    return namespace


def _printed() -> dict[str, tuple[bool, list[str], list[str]]]:
    out = {}
    for line in seeds.text(LESSON).split("\n"):
        found = PRINTED.match(line.strip())
        if found:
            name, passed, hard, soft = found.groups()
            out[name] = (passed == "True", ast.literal_eval(hard), ast.literal_eval(soft))
    return out


def test_the_lesson_prints_what_its_checker_says() -> None:
    demo = _demo()
    printed = _printed()
    assert list(printed) == list(demo["trajectories"]) == ["careful", "lucky guess", "wasteful"]
    for name, messages in demo["trajectories"].items():
        r = demo["check_trajectory"](
            messages, demo["ANSWER"], reference_steps=2, rules=demo["RULES"]
        )
        assert (r["pass"], r["hard"], r["soft"]) == printed[name]


@pytest.fixture
def imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    demo = _demo()
    runs = tmp_path / "runs.jsonl"
    with runs.open("w", encoding="utf-8") as out:
        for name, messages in demo["trajectories"].items():
            # The run's final answer is the agent's last message, as run_agent's list ends.
            final = {"role": "assistant", "content": demo["ANSWER"]}
            out.write(json.dumps({"id": name, "messages": [*messages, final]}) + "\n")
    traces = tmp_path / "traces.jsonl"
    assert main(["import", str(runs), "--out", str(traces)]) == 0
    err = capsys.readouterr().err
    assert "imported 3 trace(s) with 7 tool call(s)" in err
    assert "everything in the input was mapped" in err
    return [json.loads(line) for line in traces.read_text(encoding="utf-8").splitlines()]


def test_lesson_runs_import_with_calls_and_results(imported: list[dict[str, Any]]) -> None:
    careful = imported[0]
    assert [c["name"] for c in careful["calls"]] == ["get_order", "issue_refund"]
    assert careful["calls"][1]["arguments_json"] == '{"order_id": "A-7", "amount": 49.0}'
    assert careful["calls"][1]["result"] == '{"refunded": "49.00"}'
    assert careful["final_answer"].startswith("Refunded 49.00 EUR")


def test_lesson_rules_give_the_lessons_outcomes(imported: list[dict[str, Any]]) -> None:
    suite = compile_suite(SUITE)
    printed = _printed()
    for trace in imported:
        result = suite.grade(trace)
        passed, hard, soft = printed[trace["id"]]
        assert (result.verdict == result_pb2.VERDICT_PASS) is passed
        failed = [r for r in result.results if r.status == result_pb2.ASSERTION_STATUS_FAIL]
        ours_hard = [r.name for r in failed if r.severity == assertion_pb2.SEVERITY_HARD]
        ours_soft = [r for r in failed if r.severity == assertion_pb2.SEVERITY_SOFT]
        # Hard failures carry the lesson's own messages as their names.
        assert ours_hard == hard
        assert result.soft_failures == len(soft)
        # Soft ones name the rule; the lesson's detail is in our reason.
        for ours, lesson in zip(ours_soft, soft, strict=True):
            assert ours.name in lesson or lesson.split()[-1] in ours.reason
            for word in re.findall(r"[a-z_]+_[a-z_]+|\d+", lesson):
                assert word in ours.reason, (lesson, ours.reason)


def test_messages_without_a_recognisable_tool_call_fail_the_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs.jsonl"
    message = {"role": "assistant", "tool_calls": [{"id": "c1", "tool": "get_order", "args": {}}]}
    runs.write_text(json.dumps({"id": "r", "messages": [message]}) + "\n", encoding="utf-8")
    assert main(["import", str(runs), "--out", str(tmp_path / "out.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "not mapped: UNRECOGNISED_TOOL_CALL x1" in err
    assert (
        "messages[0].tool_calls[0]: no 'function' object and no 'name' (keys: 'id', 'tool', 'args')"
        in err
    )
    assert "no tool call mapped (input read as openai)" in err


def test_lesson_argument_rules_fail_a_wrong_refund() -> None:
    # Not one of the lesson's runs: its argument rules must be able to fail too.
    demo = _demo()
    messages = [
        demo["tc"]("get_order", order_id="A-7"),
        demo["tc"]("issue_refund", order_id="A-8", amount=60.0),
    ]
    result = compile_suite(SUITE).grade(openai.from_items(messages))
    failed = [r.name for r in result.results if r.status == result_pb2.ASSERTION_STATUS_FAIL]
    assert failed == ["refund targeted the wrong order", "refund exceeds the order amount"]


# SPEC §16 example 6: the lesson's exercise 1 ("issue_refund must only happen if a prior
# get_order result showed charged_times >= 2") as CEL over the calls' parsed results.
EXERCISE_1 = (
    'calls.all(r, r.name != "issue_refund" || calls.exists(c, c.name == "get_order" && '
    "c.position < r.position && c.result_json != null && has(c.result_json.charged_times) && "
    "c.result_json.charged_times >= 2))"
)


def test_lesson_exercise_1_as_cel(imported: list[dict[str, Any]]) -> None:
    suite = compile_suite({"assertions": [{"name": "ex1", "expression": {"expr": EXERCISE_1}}]})
    runs = {trace["id"]: trace for trace in imported}
    statuses = {name: suite.grade(trace).results[0].status for name, trace in runs.items()}
    assert statuses == {
        "careful": result_pb2.ASSERTION_STATUS_PASS,
        "lucky guess": result_pb2.ASSERTION_STATUS_FAIL,
        "wasteful": result_pb2.ASSERTION_STATUS_PASS,
    }
    charged_once = json.loads(json.dumps(runs["careful"]))
    charged_once["calls"][0]["result"] = charged_once["calls"][0]["result"].replace(
        '"charged_times": 2', '"charged_times": 1'
    )
    assert '"charged_times": 1' in charged_once["calls"][0]["result"]
    result = suite.grade(charged_once).results[0]
    assert (result.status, result.reason_code) == (
        result_pb2.ASSERTION_STATUS_FAIL,
        "EXPRESSION_FALSE",
    )
