"""SPEC §16 worked examples 4 (`budget`) and 5 (`duration`) through the Python API, and every
INVALID_ARGUMENT of the two kinds."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from trajgrade.v1 import assertion_pb2, result_pb2

FAIL = result_pb2.ASSERTION_STATUS_FAIL
PASS = result_pb2.ASSERTION_STATUS_PASS

EXAMPLE_4_TRACE: dict[str, Any] = {
    "id": "example-4",
    "model_calls": [
        {"model": "big", "input_tokens": 25_000, "output_tokens": 5_000},
        {"model": "small", "input_tokens": 10_000, "output_tokens": 2_000, "agent": "billing"},
    ],
}
# A real clock reading: §10 reads a zero start or end as "timing not recorded".
START = 1_767_225_600_000_000_000


def _grade(assertion: dict[str, Any], trace: dict[str, Any]) -> result_pb2.GradeResult:
    return trajgrade.compile_suite({"assertions": [assertion]}).grade(trace)


def test_example_4_budget_over_total_tokens() -> None:
    graded = _grade({"budget": {"max_total_tokens": 40000}}, EXAMPLE_4_TRACE)
    (result,) = graded.results
    assert (result.name, result.status, result.reason_code) == ("budget", FAIL, "OVER_BUDGET")
    assert result.reason == "total tokens 42,000 > 40,000 over 2 model calls"
    assert list(result.positions) == []
    assert result.severity == assertion_pb2.SEVERITY_HARD
    assert graded.verdict == result_pb2.VERDICT_FAIL
    assert (result.score, graded.mean_score) == (0.0, 0.0)


def test_example_4_budget_scoped_to_billing() -> None:
    assertion = {"budget": {"max_total_tokens": 40000}, "scope": {"agent": "billing"}}
    (result,) = _grade(assertion, EXAMPLE_4_TRACE).results
    assert (result.status, result.reason_code, result.score) == (PASS, "", 1.0)


def _refund(start: int, end: int) -> dict[str, Any]:
    return {"name": "issue_refund", "start_time_unix_nano": start, "end_time_unix_nano": end}


def test_example_5_duration_too_slow_and_timing_not_recorded() -> None:
    assertion = {"duration": {"tool": "issue_refund", "max_call_ms": 2000}}
    lookups = [{"name": "lookup_account"}] * 3
    slow = {"calls": [*lookups, _refund(START, START + 2_350_000_000)]}
    (result,) = _grade(assertion, slow).results
    assert (result.name, result.status) == ("duration:issue_refund", FAIL)
    assert result.reason_code == "TOO_SLOW"
    assert list(result.positions) == [4]
    assert result.reason == "call 4 issue_refund took 2,350 ms; at most 2,000 ms allowed"

    untimed = {"calls": [_refund(START, 0)]}
    (result,) = _grade(assertion, untimed).results
    assert (result.reason_code, list(result.positions)) == ("TIMING_NOT_RECORDED", [1])

    at_the_bound = {"calls": [_refund(START, START + 2_000_000_000), *lookups]}
    assert _grade(assertion, at_the_bound).results[0].status == PASS


@pytest.mark.parametrize(
    ("assertion", "field", "message"),
    [
        ({"duration": {"tool": "a"}}, "assertions[0].duration", "at least one bound"),
        (
            {"duration": {"tool": "a", "glob": "a*", "max_call_ms": 1}},
            "assertions[0].duration.glob",
            "not both",
        ),
        (
            {"duration": {"glob": "a\\", "max_total_ms": 1}},
            "assertions[0].duration.glob",
            "unfinished escape",
        ),
        ({"budget": {}}, "assertions[0].budget", "at least one bound"),
        ({"budget": {"max_cost": -1}}, "assertions[0].budget.max_cost", "finite number >= 0"),
        ({"budget": {"max_cost": "NaN"}}, "assertions[0].budget.max_cost", "finite number"),
        ({"budget": {"max_cost": "Infinity"}}, "assertions[0].budget.max_cost", "finite number"),
    ],
)
def test_invalid_duration_and_budget(assertion: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(trajgrade.InvalidSuiteError) as caught:
        trajgrade.compile_suite({"assertions": [assertion]})
    assert field in str(caught.value)
    assert message in str(caught.value)
