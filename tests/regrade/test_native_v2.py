"""SPEC v2 columns (§10) of the native Parquet schema through every regrade path: the importer
writes and reads them, and the Arrow-buffer path (arrowcols), the JSON-lines path (arrowjson)
and the reference decoder (protobuf's json_format) give the same traces and the same rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import json_format
from regrade_reference import large_schema
from regrade_workload import arrow_rows
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.importers import parquet
from trajgrade.importers.report import ImportReport
from trajgrade.regrade import arrowcols, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.source import ReadFailure, batch_traces
from trajgrade.v1 import suite_pb2, trace_pb2

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND

_ROWS: list[dict[str, Any]] = [
    {
        "id": "two-turns",
        "calls": [
            {"name": "lookup", "arguments_json": '{"q": "a"}', "turn": 1, "agent": "triage",
             "server": "crm", "start_time_unix_nano": T0, "end_time_unix_nano": T0 + SECOND},
            {"name": "issue_refund", "arguments_json": '{"amount": 30}', "turn": 2,
             "agent": "triage/billing", "server": "payments",
             "start_time_unix_nano": T0 + 5 * SECOND, "end_time_unix_nano": T0 + 8 * SECOND},
            {"name": "notify", "turn": None, "agent": None, "server": "",
             "start_time_unix_nano": 0, "end_time_unix_nano": None},
        ],
        "final_answer": "refunded",
        "metadata": [("env", "prod")],
        "model_calls": [
            {"model": "gpt", "input_tokens": 30_000, "output_tokens": 2_000, "cost": 0.5,
             "turn": 1, "agent": "triage", "start_time_unix_nano": T0,
             "end_time_unix_nano": T0 + 2 * SECOND},
            {"model": "gpt", "input_tokens": 2**64 - 1, "output_tokens": None, "cost": None,
             "turn": 2**32 - 1, "agent": None},
            {"model": None, "input_tokens": 0, "output_tokens": 0, "cost": 0.0},
        ],
        "turns": [{"user_input": 'refund "it"', "final_answer": "which order?"},
                  {"user_input": None, "final_answer": "refunded\n"}],
    },
    {"id": "v1-only", "calls": [{"name": "lookup"}], "final_answer": "x", "metadata": None,
     "model_calls": None, "turns": None},
    {"id": "empty-lists", "calls": [], "model_calls": [], "turns": []},
    {"id": "cheap", "model_calls": [{"model": "m", "input_tokens": 10, "cost": 1e-7}],
     "turns": [{"user_input": "hi", "final_answer": "hello"}]},
]  # fmt: skip

SUITE = {
    "assertions": [
        {"duration": {"tool": "issue_refund", "max_call_ms": 2500}},
        {"budget": {"max_total_tokens": 40_000, "max_cost": 1.0, "max_model_calls": 2}},
        {"expression": {"expr": "calls.all(c, c.agent != 'nobody') && "
                        "calls.exists(c, c.server == 'payments' && c.turn == 2)"}},
        {"tool_called": {"tool": "issue_refund"}, "scope": {"agent": "triage/*"}},
        {"trajectory_match": {"mode": "TRAJECTORY_MODE_IN_ORDER",
                              "reference": [{"name": "lookup"}]},
         "scope": {"per_turn": True}},
    ]
}  # fmt: skip


@pytest.fixture(scope="module")
def suite() -> _core.CompiledSuite:
    grader = _core.Grader(threads=2)
    message = json_format.ParseDict(SUITE, suite_pb2.Suite())
    return grader.compile_suite(message.SerializeToString())


def _row_path(row: dict[str, Any]) -> bytes:
    """A row's Python value read by the reference decoder."""
    row = dict(row)
    row["metadata"] = dict(row.get("metadata") or [])
    return json_format.ParseDict(row, trace_pb2.Trace()).SerializeToString(deterministic=True)


def _line_path(line: bytes) -> bytes:
    """A JSON line read by the reference decoder."""
    return json_format.Parse(line, trace_pb2.Trace()).SerializeToString(deterministic=True)


def _reference_rows(suite: _core.CompiledSuite, batch: pa.RecordBatch) -> list[bytes]:
    """The rows of the row-by-row path: each row's Trace as protobuf JSON, graded."""
    lines = [
        json_format.MessageToJson(trace_pb2.Trace.FromString(_row_path(row)), indent=None)
        for row in batch.to_pylist()
    ]
    return bench.grade_json_traces_to_json(suite, [line.encode() for line in lines])


@pytest.mark.parametrize("large", [False, True], ids=["string", "large"])
def test_every_path_reads_the_v2_columns_alike(suite: _core.CompiledSuite, large: bool) -> None:
    schema = large_schema(parquet.SCHEMA) if large else parquet.SCHEMA
    batch = pa.RecordBatch.from_pylist(_ROWS, schema=schema)
    lines = json_lines(batch)
    assert lines is not None
    for row, line in zip(batch.to_pylist(), lines, strict=True):
        assert _line_path(line) == _row_path(row)
    # What a server or Ray is sent for the batch: the same traces.
    sent = batch_traces(batch, "t", 1)
    assert [trace_pb2.Trace.FromString(b) for b in sent if isinstance(b, bytes)] == [
        trace_pb2.Trace.FromString(_row_path(row)) for row in batch.to_pylist()
    ]
    assert arrowcols.columns(batch) is not None
    expected = _reference_rows(suite, batch)
    assert bench.grade_json_traces_to_json(suite, lines) == expected
    assert arrow_rows(suite, batch) == expected
    for start in range(1, len(_ROWS)):
        part = batch.slice(start)
        assert arrow_rows(suite, part) == expected[start:]
    first = json.loads(expected[0])
    codes = [r["reason_code"] for r in first["results"]]
    # The 3 s refund is over 2.5 s; a null cost is "not recorded" (not 0) on every path; the
    # agent, server and turn the expression and the scope read are there.
    assert codes[:4] == ["TOO_SLOW", "COST_NOT_RECORDED", "", ""], first
    cheap = json.loads(expected[3])
    assert [r["reason_code"] for r in cheap["results"]][1] == "", cheap


def test_importer_round_trip_and_regrade_from_buffers(
    tmp_path: Path, suite: _core.CompiledSuite,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    traces = [trace_pb2.Trace.FromString(_row_path(row)) for row in _ROWS]
    path = tmp_path / "v2.parquet"
    assert parquet.write(traces, path) == len(traces)
    report = ImportReport()
    assert list(parquet.read(path, report)) == traces
    assert not report.unmapped
    assert (report.traces, report.model_calls) == (4, 4)
    suite_path = tmp_path / "suite.json"
    suite_path.write_text(json.dumps(SUITE), encoding="utf-8")

    def no_json(batch: pa.RecordBatch) -> None:
        raise AssertionError("arrowjson used: the buffers path should take the native schema")

    monkeypatch.setattr("trajgrade.regrade.source.json_lines", no_json)
    out = tmp_path / "rows.jsonl"
    summary = regrade([str(path)], suite_path, str(out))
    assert summary.traces == len(traces) and summary.errors == 0
    expected = _reference_rows(suite, pq.read_table(path).to_batches()[0])
    assert out.read_bytes().splitlines() == [row.rstrip(b"\n") for row in expected]


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("turn", pa.array([[{"turn": 2**32}]], pa.list_(pa.struct([("turn", pa.int64())])))),
        ("turn", pa.array([[{"turn": -1}]], pa.list_(pa.struct([("turn", pa.int64())])))),
    ],
)
def test_out_of_range_values_are_errors_on_every_path(column: str, values: pa.Array) -> None:
    batch = pa.RecordBatch.from_arrays([pa.array(["t"]), values], names=["id", "calls"])
    assert arrowcols.columns(batch) is None
    # The JSON line carries the value as it is and is refused as the row is (the reference
    # decoder names the field), and the core refuses it: an error row, not a wrapped number.
    lines = json_lines(batch)
    assert lines is not None
    with pytest.raises(json_format.ParseError, match=column):
        _line_path(lines[0])
    with pytest.raises(json_format.ParseError, match=column):
        _row_path(batch.to_pylist()[0])
    (failure,) = batch_traces(batch, "t.parquet", 1)
    assert isinstance(failure, ReadFailure)
    assert (failure.trace_id, failure.field) == ("t", "t.parquet:row 1")


def test_model_call_costs_and_tokens_outside_the_fast_forms() -> None:
    cost = pa.struct([("model", pa.string()), ("cost", pa.float64())])
    nan = pa.RecordBatch.from_arrays(
        [pa.array([[{"model": "m", "cost": float("nan")}]], pa.list_(cost))], names=["model_calls"]
    )
    # The buffers carry NaN as the row path's protobuf double does; JSON has no NaN.
    assert arrowcols.columns(nan) is not None
    assert json_lines(nan) is None
    tokens = pa.struct([("input_tokens", pa.int64())])
    negative = pa.RecordBatch.from_arrays(
        [pa.array([[{"input_tokens": -5}]], pa.list_(tokens))], names=["model_calls"]
    )
    assert arrowcols.columns(negative) is None
    int_cost = pa.struct([("cost", pa.int64())])
    costs = pa.array([[{"cost": 3}], [{"cost": 2**53 + 1}]], pa.list_(int_cost))
    exact = pa.RecordBatch.from_arrays([costs], names=["model_calls"])
    assert arrowcols.columns(exact) is None  # 2**53 + 1 is not a double
    assert arrowcols.columns(exact.slice(0, 1)) is not None
