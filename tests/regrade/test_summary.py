"""The core's rows and counts of outcomes graded elsewhere (_core.outcome_block: importer
formats, other Parquet layouts, a server) and the JSONL → Arrow table path (Parquet parts),
against Python's row writer and rows counted one by one, on hand-built rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import json_format
from regrade_reference import counted
from trajgrade import _core
from trajgrade.regrade.output import (
    ROW_FIELDS,
    arrow_schema,
    arrow_table_from_columns,
    arrow_table_from_jsonl,
    error_row,
    jsonl_line,
    row_from_json,
)
from trajgrade.regrade.summary import Summary
from trajgrade.v1 import result_pb2

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


def _items(rows: list[dict[str, Any]]) -> list[bytes | tuple[str, str, str]]:
    """The rows as outcome_block takes them: TraceOutcome bytes, or an unreadable record."""
    items: list[bytes | tuple[str, str, str]] = []
    for row in rows:
        if row["error"] is not None:
            error = row["error"]
            items.append((row["trace_id"], error["field"], error["message"]))
            continue
        result = json_format.ParseDict(
            {k: row[k] for k in ROW_FIELDS[:-1]}, result_pb2.GradeResult()
        )
        items.append(result_pb2.TraceOutcome(result=result).SerializeToString())
    return items


def test_outcome_block_writes_python_rows() -> None:
    rows = _rows(120)
    block = _core.outcome_block("s1", _items(rows), 0)
    assert block.rows == b"".join(jsonl_line(row) for row in rows)
    assert block.longest_row == max(len(jsonl_line(row)) for row in rows)
    assert (block.items, block.errors) == (120, sum(r["error"] is not None for r in rows))
    assert block.error_codes == [("INVALID_TRACE", block.errors)]
    with pytest.raises(TypeError):
        _core.outcome_block("s1", ["not bytes"], 0)  # type: ignore[list-item]


def test_arrow_table_from_jsonl_equals_the_rows() -> None:
    rows = _rows(120)
    lines = [jsonl_line(row) for row in rows]
    table = arrow_table_from_jsonl(b"".join(lines), max(map(len, lines)))
    expected = pa.Table.from_pylist(
        [row_from_json(json.loads(line)) for line in lines], schema=arrow_schema()
    )
    assert table.schema.equals(arrow_schema(), check_metadata=True)
    assert table.equals(expected)
    assert table.column("score").type == pa.float64()
    assert arrow_table_from_jsonl(b"", 0).equals(arrow_schema().empty_table())


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("sample", [0, 3, 200])
def test_block_summary_equals_row_summary(chunk: int, sample: int) -> None:
    """The core's counts per block merged (Summary.add_block), resumed from a manifest halfway,
    equal the rows counted one by one."""
    rows = _rows(300)
    items = _items(rows)
    reference = counted(rows, "s1", sample)
    merged = Summary(suite_id="s1", failure_sample=sample)
    for start in range(0, len(rows), chunk):
        if start // chunk == len(rows) // chunk // 2:  # resumed from a manifest halfway
            merged = Summary.from_json(json.loads(json.dumps(merged.to_json())))
        max_failing = 0 if merged.sample_full else sample
        merged.add_block(_core.outcome_block("s1", items[start : start + chunk], max_failing))
    assert merged.to_json() == reference.to_json()
    assert reference.soft_failures > 0 and reference.errors > 0
    assert set(reference.assertions) == set(NAMES)
    # Scores are summed exactly (units of 0.0001), whatever the chunking.
    partial = merged.assertions[NAMES[1]]
    assert 0.0 < partial.mean_score < partial.pass_rate + 0.6667
    assert partial.score_units == sum(
        round(r["score"] * 10_000)
        for row in rows
        if row["error"] is None
        for r in row["results"]
        if r["name"] == NAMES[1]
    )
    assert merged.mean_score_units == sum(
        round(row["mean_score"] * 10_000) for row in rows if row["error"] is None
    )


@pytest.mark.parametrize("chunk", [1, 7, 300])
def test_core_arrow_columns_equal_the_json_reader(chunk: int, tmp_path: Path) -> None:
    """The core's Arrow buffers of a block's rows (arrow=True) make the table Arrow's JSON
    reader makes of its JSONL rows, and the Parquet files read back equal: every column state
    (error rows' nulls, graded rows' null error, empty results and positions, soft failures,
    partial scores, non-ASCII and escaped strings)."""
    rows = _rows(300)
    items = _items(rows)
    for start in range(0, len(rows), chunk):
        block = _core.outcome_block("s1", items[start : start + chunk], 0, True)
        assert block.columns is not None
        table = arrow_table_from_columns(block.items, block.columns)
        table.validate(full=True)
        plain = _core.outcome_block("s1", items[start : start + chunk], 0)
        expected = arrow_table_from_jsonl(plain.rows, plain.longest_row)
        # With the columns, the JSONL rows are the marked (error) rows only.
        assert block.rows == b"".join(plain.rows[m.row_start : m.row_end] for m in plain.marks)
        assert table.schema.equals(arrow_schema(), check_metadata=True)
        assert table.equals(expected)
    pq.write_table(table, tmp_path / "core.parquet")
    pq.write_table(expected, tmp_path / "json.parquet")
    assert pq.read_table(tmp_path / "core.parquet").equals(pq.read_table(tmp_path / "json.parquet"))
    assert _core.outcome_block("s1", items[:3], 0).columns is None  # only when asked for
