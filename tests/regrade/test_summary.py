"""The JSONL → Arrow table path (Parquet parts) and the Arrow-compute summary (Ray's driver),
each against the row-by-row reference on hand-built rows."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from trajgrade.regrade.output import (
    arrow_schema,
    arrow_table,
    arrow_table_from_jsonl,
    error_row,
    jsonl_line,
    row_from_json,
)
from trajgrade.regrade.summary import Summary

NAMES = ["tool_count:get_*", 'odd "q" \\ é', "ünïcode ✓", "step_count"]


def _result(name: str, passed: bool, severity: str = "SEVERITY_HARD") -> dict[str, Any]:
    return {
        "name": name,
        "status": "ASSERTION_STATUS_PASS" if passed else "ASSERTION_STATUS_FAIL",
        "severity": severity,
        "reason_code": "" if passed else "NO_MATCHING_CALL",
        "reason": "" if passed else 'expected "x" — got ☃\n',
        "positions": [] if passed else [0, 4294967295],
        # Partial credit on some failures (a trajectory_score below its min_score, SPEC §12).
        "score": 1.0 if passed else (0.6667 if name == NAMES[1] else 0.0),
    }


def _rows(n: int) -> list[dict[str, Any]]:
    """Pass, fail, soft-failure, empty-results and item-error rows; names appear mid-run."""
    rows = []
    for i in range(n):
        if i % 11 == 5:
            rows.append(error_row(f"t{i}", "s1", "INVALID_TRACE", f"traces[{i}]", 'bad ☃ "x"'))
            continue
        names = NAMES[: 1 + min(i // 10, 3)] if i % 13 else []
        results = [_result(name, (i + j) % 3 != 0, "SEVERITY_SOFT" if j == 2 else "SEVERITY_HARD")
                   for j, name in enumerate(names)]  # fmt: skip
        hard_fail = any(r["severity"] == "SEVERITY_HARD" and r["status"] != "ASSERTION_STATUS_PASS"
                        for r in results)  # fmt: skip
        rows.append(
            {
                "trace_id": f"t{i} ✓" if i % 4 == 0 else f"t{i}",
                "suite_id": "s1",
                "verdict": "VERDICT_FAIL" if hard_fail else "VERDICT_PASS",
                "score": 1.0 if not results else (i % 7) / 7,
                "soft_failures": sum(
                    r["severity"] == "SEVERITY_SOFT" and r["status"] != "ASSERTION_STATUS_PASS"
                    for r in results
                ),
                "results": results,
                "mean_score": round(sum(r["score"] for r in results) / len(results), 4)
                if results
                else 1.0,
                "error": None,
            }
        )
    return rows


def test_arrow_table_from_jsonl_equals_arrow_table() -> None:
    rows = _rows(120)
    lines = [jsonl_line(row) for row in rows]
    table = arrow_table_from_jsonl(b"".join(lines), max(map(len, lines)))
    expected = arrow_table([row_from_json(json.loads(line)) for line in lines])
    assert table.schema.equals(arrow_schema(), check_metadata=True)
    assert table.equals(expected)
    assert table.column("score").type == pa.float64()
    assert arrow_table_from_jsonl(b"", 0).equals(arrow_schema().empty_table())


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("sample", [0, 3, 200])
def test_table_summary_equals_row_summary(chunk: int, sample: int) -> None:
    rows = _rows(300)
    reference = Summary(suite_id="s1", failure_sample=sample)
    reference.add(rows)
    counted = Summary(suite_id="s1", failure_sample=sample)
    for start in range(0, len(rows), chunk):
        if start // chunk == len(rows) // chunk // 2:  # resumed from a manifest halfway
            counted = Summary.from_json(json.loads(json.dumps(counted.to_json())))
        counted.add_table(arrow_table(rows[start : start + chunk]))
    assert counted.to_json() == reference.to_json()
    assert reference.soft_failures > 0 and reference.errors > 0
    assert set(reference.assertions) == set(NAMES)
    # Scores are summed exactly (units of 0.0001), whatever the chunking.
    partial = reference.assertions[NAMES[1]]
    assert 0.0 < partial.mean_score < partial.pass_rate + 0.6667
    assert partial.score_units == sum(
        round(r["score"] * 10_000)
        for row in rows
        if row["error"] is None
        for r in row["results"]
        if r["name"] == NAMES[1]
    )
    assert reference.mean_score_units == sum(
        round(row["mean_score"] * 10_000) for row in rows if row["error"] is None
    )
