"""SPEC §14 expressions through the Python API: §16 example 7 (comprehension nesting and the
cost limit), the new call variables and mixed numbers, and the library's cost limit setting."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from trajgrade.traces import trace_from_dict
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


V2_TRACE: dict[str, Any] = {
    "id": "v2",
    "calls": [
        {
            "name": "get_order",
            "start_time_unix_nano": 1_000_000_000,
            "end_time_unix_nano": 3_350_000_000,
            "turn": 2,
            "agent": "triage/billing",
            "server": "orders-mcp",
        },
        {"name": "log", "start_time_unix_nano": 5},
    ],
    "model_calls": [
        {"model": "big", "input_tokens": 30000, "output_tokens": 1000, "cost": 0.5, "turn": 1},
        {"input_tokens": 12000, "agent": "billing"},
    ],
}


@pytest.mark.parametrize(
    ("expr", "passes"),
    [
        ("calls[0].duration_ms == 2350.0 && calls[1].duration_ms == null", True),
        ("calls[0].duration_ms > 2350.0", False),
        ("calls[0].turn == 2 && calls[1].turn == 1", True),
        ("calls[0].agent == 'triage/billing' && calls[1].agent == ''", True),
        ("calls[0].server == 'orders-mcp'", True),
        ("calls[1].server == 'orders-mcp'", False),
        ("model_calls.size() == 2 && model_calls[0].model == 'big'", True),
        ("model_calls[0].cost == 0.5 && model_calls[1].cost == null", True),
        ("model_calls[1].agent == 'billing' && model_calls[1].turn == 1", True),
        ("usage.total_tokens == 43000 && usage.cost == null", True),
        ("usage.input_tokens > 40000", True),
        ("usage.output_tokens > 1000", False),
    ],
)
def test_v2_trace_variables(expr: str, passes: bool) -> None:
    """Each §14 variable reads the trace's v2 fields, whether the trace is a dict (the binding's
    encoder) or a Trace message (upb's encoding)."""
    suite = trajgrade.compile_suite(_suite(expr))
    as_dict = suite.grade(V2_TRACE).results[0]
    assert as_dict.reason_code != "EXPRESSION_ERROR", as_dict.reason
    assert (as_dict.status == result_pb2.ASSERTION_STATUS_PASS) is passes
    assert suite.grade(trace_from_dict(V2_TRACE)).results[0] == as_dict
