"""The tests' reference summary: rows counted one by one in Python, independently of the core's
block counts that the regrade paths merge (Summary.add_block)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from trajgrade.regrade.output import Row
from trajgrade.regrade.summary import DEFAULT_FAILURE_SAMPLE, AssertionStats, Summary, score_units


def counted(
    rows: Iterable[Row], suite_id: str, failure_sample: int = DEFAULT_FAILURE_SAMPLE
) -> Summary:
    """The summary of these rows (in order), failing and error rows sampled in order."""
    summary = Summary(suite_id=suite_id, failure_sample=failure_sample)
    for row in rows:
        summary.traces += 1
        if row["error"] is not None:
            summary.errors += 1
            code = row["error"]["reason_code"]
            summary.error_codes[code] = summary.error_codes.get(code, 0) + 1
            summary.sample(row)
            continue
        passed = row["verdict"] == "VERDICT_PASS"
        summary.passed += passed
        summary.failed += not passed
        summary.soft_failures += row["soft_failures"]
        summary.mean_score_units += score_units(row["mean_score"])
        for result in row["results"]:
            stats = summary.assertions.setdefault(
                result["name"], AssertionStats(result["severity"])
            )
            stats.score_units += score_units(result["score"])
            if result["status"] == "ASSERTION_STATUS_PASS":
                stats.passed += 1
            else:
                stats.failed += 1
        if not passed:
            summary.sample(row)
    return summary


def without_messages(rows: Iterable[Row]) -> list[Row]:
    """Rows with each error's message blanked (the row-by-row Python decoder words its errors
    as json_format does, the core as its own decoder does)."""
    return [
        {**row, "error": {**row["error"], "message": ""}} if row["error"] is not None else row
        for row in rows
    ]


def large_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with large_string and large_list at every level (the 64-bit offsets the
    readers take as well)."""

    def wide(t: pa.DataType) -> pa.DataType:
        if pa.types.is_string(t):
            return pa.large_string()
        if pa.types.is_list(t):
            return pa.large_list(wide(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, wide(f.type)) for f in t])
        if pa.types.is_map(t):
            return pa.map_(wide(t.key_type), wide(t.item_type))
        return t

    return pa.schema([pa.field(f.name, wide(f.type)) for f in schema])
