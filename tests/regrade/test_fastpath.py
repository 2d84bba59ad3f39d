"""The core-decoded paths: JSONL rows from grade_json_traces_to_json, Parquet rows as JSON lines,
and the byte-count summary, each against the row-by-row reference."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import read_rows, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import jsonl_line, row_from_json
from trajgrade.regrade.summary import Summary
from trajgrade.regrade.tracejson import trace_bytes, trace_bytes_from_dict


def test_byte_count_summary_equals_row_summary(workload: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    regrade([str(workload["jsonl"])], workload["suite"], str(out), chunk_size=64)
    rows = list(read_rows(str(out)))
    lines = [jsonl_line(row) for row in rows]
    assert b"".join(lines) == out.read_bytes()
    # A name that needs escaping, and soft failures, in some rows.
    for i in range(0, len(lines), 7):
        lines[i] = lines[i].replace(b'"name":"no_repeated_calls"', b'"name":"odd \\"q\\" \\u00e9"')
        lines[i] = lines[i].replace(b',"soft_failures":0,', b',"soft_failures":2,')
    reference, counted = Summary(failure_sample=5), Summary(failure_sample=5)
    reference.add(row_from_json(json.loads(line)) for line in lines)
    for start in range(0, len(lines), 50):
        counted.add_jsonl(lines[start : start + 50])
    assert counted.to_json() == reference.to_json()
    assert counted.errors == 1 and 'odd "q" é' in counted.assertions
    assert counted.soft_failures > 0


def test_parquet_rows_as_json_lines(tmp_path: Path, workload: dict[str, Path]) -> None:
    """The importers' schema (map metadata, timestamps), awkward strings, nulls, empty lists."""
    rows = [
        {
            "id": 'we"ird\\\u0001é\n',
            "calls": [
                {"name": "get_user", "arguments_json": "", "result": None, "error": True,
                 "id": "c1", "start_time_unix_nano": 2**64 - 1, "end_time_unix_nano": None},
                {"name": None},
            ],
            "final_answer": "tab\there",
            "metadata": [("k\"", "v\\"), ("a", "")],
        },
        {"id": None, "calls": None, "final_answer": None, "metadata": None},
        {"id": "z", "calls": [], "final_answer": "", "metadata": []},
    ]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    lines = json_lines(batch)
    assert lines is not None
    for row, line in zip(batch.to_pylist(), lines, strict=True):
        row["metadata"] = dict(row["metadata"] or [])
        assert trace_bytes(line) == trace_bytes_from_dict(row)
    sliced = json_lines(batch.slice(1))
    assert sliced == lines[1:]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_batches([batch]), path)
    out = tmp_path / "r.jsonl"
    summary = regrade([str(path)], workload["suite"], str(out))
    assert summary.traces == 3 and summary.errors == 0
    got = [json.loads(line)["trace_id"] for line in out.read_bytes().splitlines()]
    assert got == ['we"ird\\\u0001é\n', "", "z"]


def test_unusual_columns_fall_back_to_rows() -> None:
    batch = pa.RecordBatch.from_pylist([{"id": "a", "extra": 1}])
    assert json_lines(batch) is None
    assert json_lines(pa.RecordBatch.from_pylist([{"id": 5}])) is None
