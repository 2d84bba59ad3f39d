"""The conformance corpus (tests/conformance, vendored from shared/) and its comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trajgrade.v1 import assertion_pb2, result_pb2

CONFORMANCE_DIR = Path(__file__).resolve().parents[1] / "conformance"


def load_cases() -> list[dict[str, Any]]:
    """Every case of cases.jsonl; fails loudly when the corpus is missing."""
    path = CONFORMANCE_DIR / "cases.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"conformance corpus not found at {path}: the repository checkout is incomplete"
        )
    # Split on "\n" only: str.splitlines would also split on U+2028 and friends (README).
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n") if line.strip()]


CASES = load_cases()


def result_dict(result: result_pb2.GradeResult) -> dict[str, Any]:
    """The compared fields of a GradeResult, spelled as in the conformance cases."""
    return {
        "verdict": result_pb2.Verdict.Name(result.verdict),
        "score": result.score,
        "soft_failures": result.soft_failures,
        "results": [
            {
                "name": r.name,
                "status": result_pb2.AssertionStatus.Name(r.status),
                "severity": assertion_pb2.Severity.Name(r.severity),
                "reason_code": r.reason_code,
                "positions": list(r.positions),
            }
            for r in result.results
        ],
    }


def compare_outcome(expect: dict[str, Any], got: dict[str, Any]) -> None:
    """Asserts the conformance README's comparison: every field present in `expect`."""
    for key in ("verdict", "soft_failures"):
        if key in expect:
            assert got[key] == expect[key], key
    if "score" in expect:
        assert got["score"] == float(expect["score"]), "score"
    if "results" in expect:
        assert len(got["results"]) == len(expect["results"]), "result count"
        for i, (g, e) in enumerate(zip(got["results"], expect["results"], strict=True)):
            for key in ("name", "status", "severity", "reason_code", "positions"):
                if key in e:
                    assert g[key] == e[key], f"results[{i}].{key}"
