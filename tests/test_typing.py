"""The public API used as users will; `make typecheck` runs mypy --strict over this file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trajgrade
from trajgrade._core import bench
from trajgrade.v1 import result_pb2, suite_pb2, trace_pb2

SUITE: dict[str, object] = {
    "name": "refunds",
    "assertions": [
        {"tool_called": {"tool": "lookup"}},
        {
            "tool_call_args": {
                "tool": "refund",
                "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"amount_cents": 5000}'},
            }
        },
    ],
}
TRACE: dict[str, object] = {
    "id": "t-1",
    "calls": [
        {"name": "lookup", "arguments_json": "{}"},
        {"name": "refund", "arguments_json": '{"amount_cents": 5000.0, "note": "x"}'},
    ],
}


def test_compile_and_grade_every_input_form(tmp_path: Path) -> None:
    message = trajgrade.load_suite(SUITE)
    path = tmp_path / "suite.yaml"
    path.write_text(
        "name: refunds\nassertions:\n  - tool_called: {tool: lookup}\n"
        "  - tool_call_args: {tool: refund, match: {mode: MATCH_MODE_SUBSET,"
        " args_json: '{\"amount_cents\": 5000}'}}\n",
        encoding="utf-8",
    )
    forms: list[trajgrade.suites.SuiteInput] = [
        SUITE,
        message,
        message.SerializeToString(),
        '{"assertions": [{"tool_called": {"tool": "lookup"}}]}',
        path,
        str(path),
    ]
    for form in forms:
        compiled: trajgrade.CompiledSuite = trajgrade.compile_suite(form)
        suite_id: str = compiled.suite_id
        assert suite_id.startswith("s1-")
        result: result_pb2.GradeResult = compiled.grade(TRACE)
        assert result.trace_id == "t-1"
        assert result.verdict == result_pb2.VERDICT_PASS
    assert trajgrade.compile_suite(path).suite_id == trajgrade.compile_suite(SUITE).suite_id


def test_trace_from_a_path(tmp_path: Path) -> None:
    compiled = trajgrade.compile_suite(SUITE)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(TRACE), encoding="utf-8")
    by_path = compiled.grade(path)
    assert by_path == compiled.grade(str(path)) == compiled.grade(TRACE)
    assert by_path.verdict == result_pb2.VERDICT_PASS
    # A str that is not an existing file stays JSON text (and is reported as such).
    with pytest.raises(trajgrade.InvalidRequestError, match="not JSON"):
        compiled.grade(str(tmp_path / "missing.json"))


def test_trace_forms_and_batch() -> None:
    compiled = trajgrade.compile_suite(SUITE)
    message = trace_pb2.Trace()
    message.id = "t-2"
    message.calls.add(name="lookup")
    outcomes = compiled.grade_batch(
        [TRACE, message, message.SerializeToString(), '{"id": "t-3"}', b"\xff", {"bogus": 1}]
    )
    assert len(outcomes) == 6
    verdicts = [o.verdict for o in outcomes if isinstance(o, result_pb2.GradeResult)]
    assert (
        verdicts
        == [result_pb2.VERDICT_PASS, result_pb2.VERDICT_FAIL] + [result_pb2.VERDICT_FAIL] * 2
    )
    errors = [o for o in outcomes if isinstance(o, result_pb2.ItemError)]
    assert [(e.reason_code, e.field) for e in errors] == [
        ("INVALID_TRACE", "traces[4]"),
        ("INVALID_TRACE", "traces[5].bogus"),
    ]


def test_errors_carry_structure() -> None:
    with pytest.raises(trajgrade.InvalidSuiteError) as info:
        trajgrade.compile_suite({"assertions": [{"tool_called": {"tool": ""}}, {"order": {}}]})
    err: trajgrade.InvalidSuiteError = info.value
    assert isinstance(err, trajgrade.TrajgradeError)
    assert err.reason_code == "INVALID_SUITE"
    assert err.field == "assertions[0].tool_called.tool"
    problems: list[tuple[str, str]] = err.problems
    assert [f for f, _ in problems][:2] == [
        "assertions[0].tool_called.tool",
        "assertions[1].order.before",
    ]
    with pytest.raises(trajgrade.InvalidSuiteError) as unknown:
        trajgrade.compile_suite({"assertions": [{"tool_called": {"tool": "a", "typo": 1}}]})
    assert unknown.value.field == "assertions[0].tool_called.typo"
    with pytest.raises(trajgrade.InvalidSuiteError) as enum:
        trajgrade.compile_suite(
            {"assertions": [{"tool_sequence": {"steps": [{"tool": "a"}], "mode": "IN_ORDER"}}]}
        )
    assert enum.value.field == "assertions[0].tool_sequence.mode"
    with pytest.raises(trajgrade.InvalidRequestError) as bad:
        trajgrade.compile_suite(SUITE).grade(b"\xff")
    assert bad.value.reason_code == "INVALID_TRACE"


def test_grader_and_limits() -> None:
    limits = trajgrade.Limits(max_calls_per_trace=1)
    assert limits.max_calls_per_trace == 1
    assert limits.max_json_depth == 128
    grader = trajgrade.Grader(limits, threads=2)
    assert grader.limits == limits
    compiled = trajgrade.compile_suite(SUITE, grader=grader)
    with pytest.raises(trajgrade.LimitExceededError) as info:
        compiled.grade(TRACE)
    assert (info.value.reason_code, info.value.field) == ("TOO_MANY_CALLS", "trace.calls")
    raw: bytes = grader.compile_suite(
        suite_pb2.Suite.FromString(
            trajgrade.load_suite(SUITE).SerializeToString()
        ).SerializeToString()
    ).suite_bytes()
    assert suite_pb2.Suite.FromString(raw).name == "refunds"
    assert bench.decode_only([trajgrade.trace_bytes(TRACE), b"\xff"]) == 1
    assert isinstance(trajgrade.__version__, str)
