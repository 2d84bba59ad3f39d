"""Parquet rows as JSON lines (arrowjson) against the reference decoder (json_format) of the
rows' Python values."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf import json_format
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.v1 import trace_pb2


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
        from_line = json_format.Parse(line, trace_pb2.Trace())
        assert from_line == json_format.ParseDict(row, trace_pb2.Trace())
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
