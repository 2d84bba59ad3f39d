"""Every shared conformance case through the public Python API (compile_suite → grade)."""

from __future__ import annotations

from typing import Any

import pytest
import trajgrade
from reference.conformance import CASES, compare_outcome, result_dict


def test_corpus_is_complete() -> None:
    assert len(CASES) == 293
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "error" in expect:
        assert expect["error"] == "INVALID_ARGUMENT"
        with pytest.raises(trajgrade.InvalidSuiteError) as info:
            trajgrade.compile_suite(case["suite"])
        assert info.value.field == expect["field"]
        assert info.value.reason_code == "INVALID_SUITE"
        assert info.value.problems[0][0] == expect["field"]
        return
    suite = trajgrade.compile_suite(case["suite"])
    result = suite.grade(case["trace"])
    assert result.trace_id == case["trace"].get("id", "")
    assert result.suite_id == suite.suite_id
    compare_outcome(expect, result_dict(result))
