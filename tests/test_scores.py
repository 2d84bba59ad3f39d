"""SPEC v2 §12-§13 through the Python API: each result's `score`, `mean_score`, `weight` and
`report_only`."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from trajgrade.v1 import result_pb2

TRACE: dict[str, Any] = {"id": "t", "calls": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}
PASSES = {"tool_called": {"tool": "a"}}
FAILS = {"tool_called": {"tool": "z"}}


def grade(*assertions: dict[str, Any]) -> Any:
    return trajgrade.compile_suite({"assertions": list(assertions)}).grade(TRACE)


def test_v1_results_score_one_or_zero_and_mean_is_the_rounded_score() -> None:
    result = grade(PASSES, FAILS, {"forbidden_tools": {"tools": ["x"]}})
    assert [r.score for r in result.results] == [1.0, 0.0, 1.0]
    assert result.score == pytest.approx(2 / 3)
    assert result.mean_score == round(result.score, 4) == 0.6667


def test_weights_weigh_the_mean_but_not_the_verdict_or_v1_score() -> None:
    result = grade({**PASSES, "weight": 3}, {**FAILS, "weight": 1})
    assert (result.mean_score, result.score) == (0.75, 0.5)
    assert result.verdict == result_pb2.VERDICT_FAIL
    zero = grade({**FAILS, "weight": 0})
    assert (zero.verdict, zero.score, zero.mean_score) == (result_pb2.VERDICT_FAIL, 0.0, 1.0)


def test_report_only_results_are_shown_and_counted_nowhere() -> None:
    result = grade({**FAILS, "report_only": True, "severity": "SEVERITY_SOFT"}, PASSES)
    assert [r.status for r in result.results] == [
        result_pb2.ASSERTION_STATUS_FAIL,
        result_pb2.ASSERTION_STATUS_PASS,
    ]
    assert result.results[0].score == 0.0
    assert (result.verdict, result.score, result.soft_failures, result.mean_score) == (
        result_pb2.VERDICT_PASS,
        1.0,
        0,
        1.0,
    )
    only = grade({**FAILS, "report_only": True})
    assert (only.verdict, only.score, only.mean_score) == (result_pb2.VERDICT_PASS, 1.0, 1.0)


def test_batch_results_carry_the_same_scores() -> None:
    suite = trajgrade.compile_suite({"assertions": [{**PASSES, "weight": 2}, FAILS]})
    [lazy] = suite.grade_batch([TRACE])
    assert (lazy.mean_score, [r.score for r in lazy.results]) == (0.6667, [1.0, 0.0])
    assert lazy == suite.grade(TRACE)


@pytest.mark.parametrize("weight", [-1, "NaN", "Infinity"])
def test_an_invalid_weight_is_rejected_at_its_field(weight: object) -> None:
    with pytest.raises(trajgrade.InvalidSuiteError) as info:
        trajgrade.compile_suite({"assertions": [PASSES, {**FAILS, "weight": weight}]})
    assert info.value.field == "assertions[1].weight"
