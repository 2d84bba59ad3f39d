"""SPEC §14 expressions through the Python API: §16 example 7 (comprehension nesting and the
cost limit), the new call variables and mixed numbers, and the library's cost limit setting."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from trajgrade.v1 import result_pb2


def _suite(expr: str) -> dict[str, Any]:
    return {"assertions": [{"name": "e", "expression": {"expr": expr}}]}


def test_example_7_nesting_5_is_invalid() -> None:
    five = "calls.all(a, calls.all(b, calls.all(c, calls.all(d, calls.all(e, true)))))"
    with pytest.raises(trajgrade.InvalidSuiteError) as caught:
        trajgrade.compile_suite(_suite(five))
    assert "assertions[0].expression.expr" in str(caught.value)
    assert "nest more than 4 deep" in str(caught.value)


def test_example_7_nesting_3_over_1000_calls_hits_the_cost_limit() -> None:
    suite = trajgrade.compile_suite(_suite("calls.all(a, calls.all(b, calls.all(c, true)))"))
    trace = {"id": "t", "calls": [{"name": "f"} for _ in range(1000)]}
    first = suite.grade(trace).results[0]
    assert first.reason_code == "EXPRESSION_ERROR"
    assert first.reason.endswith("cost limit of 1000000 exceeded")
    assert suite.grade(trace).results[0] == first


def test_the_library_cost_limit_is_configurable() -> None:
    grader = trajgrade.Grader(trajgrade.Limits(expression_cost_limit=50))
    expr = "calls.all(a, calls.all(b, a.position <= b.position || true))"
    trace = {"id": "t", "calls": [{"name": "f"} for _ in range(10)]}
    low = trajgrade.compile_suite(_suite(expr), grader=grader).grade(trace).results[0]
    assert low.reason.endswith("cost limit of 50 exceeded")
    default = trajgrade.compile_suite(_suite(expr)).grade(trace).results[0]
    assert default.status == result_pb2.ASSERTION_STATUS_PASS


def test_unknown_identifiers_are_invalid_at_compile_time() -> None:
    with pytest.raises(trajgrade.InvalidSuiteError, match="unknown identifier `limit`"):
        trajgrade.compile_suite(_suite("calls.all(c, c.position < limit)"))


@pytest.mark.parametrize(
    ("expr", "passes"),
    [
        ("calls[0].result_json.total == 5000 && calls[1].result_json == null", True),
        ("calls[2].result_json == null && calls[2].result == ''", True),
        ("math.abs(1.0 - calls[0].args.amount / 5000.0) <= 0.01", False),
        ("math.abs(1.0 - calls[0].args.amount / 500.0) <= 0.01", True),
        ("math.greatest(calls[0].args.amount, 1.5) == 500 && int(2.9) == 2", True),
        ("calls.all(c, c.duration_ms == null && c.turn == 1 && c.agent == '')", True),
        ("usage.total_tokens == 0 && model_calls.size() == 0", True),
    ],
)
def test_variables_functions_and_mixed_numbers(expr: str, passes: bool) -> None:
    trace = {
        "id": "t",
        "calls": [
            {"name": "a", "arguments_json": '{"amount": 500}', "result": '{"total": 5000}'},
            {"name": "b", "result": "not json"},
            {"name": "c"},
        ],
    }
    result = trajgrade.compile_suite(_suite(expr)).grade(trace).results[0]
    assert result.reason_code != "EXPRESSION_ERROR", result.reason
    assert (result.status == result_pb2.ASSERTION_STATUS_PASS) is passes
