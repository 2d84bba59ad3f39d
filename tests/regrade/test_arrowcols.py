"""Parquet rows graded from their Arrow buffers: the same row bytes as arrowjson's JSON lines
through grade_json_traces_to_json, and a clear ValueError for malformed buffers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trajgrade
from regrade_workload import arrow_rows
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.suite import load_suite
from trajgrade.v1.trace_pb2 import Trace

_ROWS: list[dict[str, Any]] = [
    {
        "id": 'we"ird\\\u0001é\n',
        "calls": [
            {"name": "get_user", "arguments_json": "", "result": None, "error": True,
             "id": "c1", "start_time_unix_nano": 2**64 - 1, "end_time_unix_nano": None},
            {"name": None, "arguments_json": '{"q": "\\"ü\\"\\n", "n": [1, 2.5e3]}'},
            {"name": "search", "arguments_json": "{not json", "result": "ok \U0001f600",
             "error": None},
        ],
        "final_answer": "tab\there",
        "metadata": [("k\"", "v\\"), ("a", ""), ("k\"", "later")],
    },
    {"id": None, "calls": None, "final_answer": None, "metadata": None},
    {"id": "z", "calls": [], "final_answer": "", "metadata": []},
    {"id": "日本", "calls": [{"name": "search", "arguments_json": '{"query": "x"}'}] * 3,
     "final_answer": "done", "metadata": [("env", "prod")]},
]  # fmt: skip


def _large(schema: pa.Schema) -> pa.Schema:
    """SCHEMA with large_string and large_list everywhere."""
    call = pa.struct(
        [
            pa.field(f.name, pa.large_string() if pa.types.is_string(f.type) else f.type)
            for f in SCHEMA.field("calls").type.value_type
        ]
    )
    return pa.schema(
        [
            ("id", pa.large_string()),
            ("calls", pa.large_list(call)),
            ("final_answer", pa.large_string()),
            ("metadata", pa.map_(pa.large_string(), pa.large_string())),
        ]
    )


@pytest.fixture(scope="module")
def suite(workload: dict[str, Path]) -> _core.CompiledSuite:
    grader = _core.Grader(threads=2)
    return grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())


def _both(suite: _core.CompiledSuite, batch: pa.RecordBatch) -> None:
    lines = json_lines(batch)
    assert lines is not None
    expected = bench.grade_json_traces_to_json(suite, lines)
    got = arrow_rows(suite, batch)
    assert got == expected


@pytest.mark.parametrize("schema", [SCHEMA, _large(SCHEMA)], ids=["string", "large_string"])
def test_rows_equal_the_json_path(
    suite: _core.CompiledSuite, schema: pa.Schema, tmp_path: Path
) -> None:
    batch = pa.RecordBatch.from_pylist(_ROWS, schema=schema)
    _both(suite, batch)
    for start in range(1, len(_ROWS)):
        _both(suite, batch.slice(start))
        _both(suite, batch.slice(0, start))
    # Round-tripped through a Parquet file, read back in small batches.
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_batches([batch] * 5), path, row_group_size=7)
    for read in pq.ParquetFile(path).iter_batches(batch_size=3):
        _both(suite, read)


def _handed(batch: pa.RecordBatch) -> int:
    """Bytes of the validity, offsets and values buffers columns() hands the core."""
    buffers = arrowcols.columns(batch)
    assert buffers is not None
    return sum(len(b) for column in buffers.values() for b in column[2:5] if b is not None)


@pytest.mark.parametrize("schema", [SCHEMA, _large(SCHEMA)], ids=["string", "large_string"])
def test_a_slice_hands_over_its_own_rows_only(
    suite: _core.CompiledSuite, schema: pa.Schema
) -> None:
    # A slice points at its parent's whole buffers; only the bytes its rows reference (plus
    # offsets and bitmaps) may be copied, or each batch of a table costs the whole table.
    parent = pa.RecordBatch.from_pylist(_ROWS * 500, schema=schema)
    assert _handed(parent) <= parent.get_total_buffer_size()
    for start, length in [(0, 4), (1001, 3), (parent.num_rows - 2, 2), (997, 40)]:
        part = parent.slice(start, length)
        assert part.get_total_buffer_size() > 20 * part.nbytes  # really a small slice
        assert _handed(part) <= 2 * part.nbytes
        _both(suite, part)


def test_workload_rows_equal_the_json_path(
    suite: _core.CompiledSuite, workload: dict[str, Path]
) -> None:
    rows = [json.loads(line) for line in workload["clean"].read_bytes().splitlines()]
    for row in rows:
        row["metadata"] = list((row.get("metadata") or {}).items())
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    _both(suite, batch)
    _both(suite, batch.slice(123, 200))


def test_limit_errors_match(workload: dict[str, Path]) -> None:
    grader = _core.Grader(
        _core.Limits(max_calls_per_trace=2, max_argument_bytes=20, max_trace_bytes=120)
    )
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    rows = [
        *_ROWS,
        {"id": "big", "final_answer": "x" * 200},
        {"id": "dup", "metadata": [("k", "x" * 60), ("k", "x" * 60)]},
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    _both(suite, batch)
    assert sum(b'"error":{' in row for row in arrow_rows(suite, batch) or []) >= 3


def test_unsupported_layouts_return_none() -> None:
    assert arrowcols.columns(pa.RecordBatch.from_pylist([{"id": "a", "extra": 1}])) is None
    assert (
        arrowcols.columns(pa.RecordBatch.from_pylist([{"id": "a", "metadata": {"k": "v"}}])) is None
    )
    negative = pa.RecordBatch.from_pylist([{"calls": [{"name": "a", "start_time_unix_nano": -1}]}])
    assert arrowcols.columns(negative) is None
    assert arrowcols.columns(pa.RecordBatch.from_pylist([], schema=SCHEMA)) is None


def test_malformed_buffers_raise(suite: _core.CompiledSuite) -> None:
    batch = pa.RecordBatch.from_pylist(_ROWS, schema=SCHEMA)
    good = arrowcols.columns(batch)
    assert good is not None

    def bad(name: str, **change: Any) -> str:
        length, offset, validity, offsets, values, large = good[name]
        parts = {"length": length, "offset": offset, "validity": validity, "offsets": offsets,
                 "values": values, "large": large, **change}  # fmt: skip
        columns = {**good, name: tuple(parts.values())}
        with pytest.raises(ValueError) as info:
            bench.grade_arrow_traces_to_json(suite, batch.num_rows, columns)  # type: ignore[arg-type]
        return str(info.value)

    assert "id: offsets buffer" in bad("id", offsets=b"\0" * 4)
    assert "id: 2 values, 4 needed" in bad("id", length=2)
    assert "calls.name: not UTF-8" in bad("calls.name", values=b"\xff" * 100)
    assert "calls: offset" in bad("calls", offsets=(1000).to_bytes(4, "little") * 5)
    assert "validity bitmap" in bad("id", validity=b"")
    assert "offsets decrease" in bad("final_answer", offsets=bytes([9, 0, 0, 0, 1, 0, 0, 0] * 3))
    assert "values buffer" in bad("calls.start_time_unix_nano", values=b"")
    with pytest.raises(ValueError, match="unknown column"):
        bench.grade_arrow_traces_to_json(suite, 1, {"nope": (1, 0, None, None, None, False)})


@pytest.mark.parametrize("schema", [SCHEMA, _large(SCHEMA)], ids=["string", "large_string"])
def test_arrow_traces_are_the_json_lines_traces(schema: pa.Schema) -> None:
    """What a server is sent for a batch (`_core.arrow_traces`) is the trace its JSON line
    decodes to, for every row, slices included; malformed buffers raise as for grading."""
    batch = pa.RecordBatch.from_pylist(_ROWS * 3, schema=schema)
    for part in (batch, batch.slice(2, 7)):
        buffers, lines = arrowcols.columns(part), json_lines(part)
        assert buffers is not None and lines is not None
        block = b"\n".join(lines) + b"\n"
        expected = _core.jsonl_traces(block, 0, len(block), "t.parquet", 1, "row")
        got = _core.arrow_traces(part.num_rows, buffers)
        assert all(isinstance(item, bytes) for item in expected)
        assert [Trace.FromString(b) for b in got] == [
            Trace.FromString(b) for b in expected if isinstance(b, bytes)
        ]
    good = arrowcols.columns(batch)
    assert good is not None
    length, offset, validity, _, values, large = good["id"]
    broken = {**good, "id": (length, offset, validity, b"\0" * 4, values, large)}
    with pytest.raises(ValueError, match="id: offsets buffer"):
        _core.arrow_traces(batch.num_rows, broken)


def test_regrade_of_a_parquet_file_uses_the_buffers(
    tmp_path: Path, workload: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_json(batch: pa.RecordBatch) -> None:
        raise AssertionError("arrowjson used")

    monkeypatch.setattr("trajgrade.regrade.source.json_lines", no_json)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(_ROWS * 10, schema=SCHEMA), path)
    out = tmp_path / "r.jsonl"
    summary = regrade([str(path)], workload["suite"], str(out), chunk_size=7)
    assert summary.traces == 40
    got = [json.loads(line)["trace_id"] for line in out.read_bytes().splitlines()]
    assert got == [row["id"] or "" for row in _ROWS] * 10


def test_v2_columns_are_graded_not_dropped(tmp_path: Path) -> None:
    """SPEC v2 columns with the types pyarrow infers from dicts (int64 turns and tokens) are
    read from the buffers, and the results equal grading the dicts."""
    rows: list[dict[str, Any]] = [
        {
            "id": "v2",
            "calls": [
                {"name": "issue_refund", "start_time_unix_nano": 10**18,
                 "end_time_unix_nano": 10**18 + 2_350_000_000, "turn": 1, "agent": "billing",
                 "server": "payments"},
            ],
            "model_calls": [
                {"model": "m", "input_tokens": 30_000, "output_tokens": 0, "cost": 0.5},
                {"model": "m", "input_tokens": 12_000, "output_tokens": 0, "cost": None},
            ],
            "turns": [{"user_input": "refund", "final_answer": "done"}],
        }
    ]  # fmt: skip
    suite = {
        "assertions": [
            {"duration": {"tool": "issue_refund", "max_call_ms": 2000}},
            {"budget": {"max_total_tokens": 40000}},
            {"expression": {"expr": "calls[0].agent == 'billing' && calls[0].server != ''"}},
        ]
    }
    batch = pa.RecordBatch.from_pylist(rows)
    assert arrowcols.columns(batch) is not None
    assert json_lines(batch) is not None
    suite_path = tmp_path / "suite.json"
    suite_path.write_text(json.dumps(suite), encoding="utf-8")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_batches([batch]), path)
    out = tmp_path / "r.jsonl"
    regrade([str(path)], suite_path, str(out))
    (row,) = [json.loads(line) for line in out.read_bytes().splitlines()]
    codes = [r["reason_code"] for r in row["results"]]
    assert codes == ["TOO_SLOW", "OVER_BUDGET", ""]
    direct = trajgrade.compile_suite(suite).grade(rows[0])
    assert [r["reason"] for r in row["results"]] == [r.reason for r in direct.results]


def test_call_times_reach_duration() -> None:
    """The rows' call times reach `duration` as on the JSON path (they were once dropped, so
    every Arrow row graded as untimed)."""
    grader = _core.Grader(threads=1)
    suite = trajgrade.load_suite({"assertions": [{"duration": {"glob": "*", "max_call_ms": 1500}}]})
    compiled = grader.compile_suite(suite.SerializeToString())
    rows = [
        {"id": "timed", "calls": [
            {"name": "a", "start_time_unix_nano": 10**9, "end_time_unix_nano": 3 * 10**9},
            {"name": "b", "start_time_unix_nano": 5, "end_time_unix_nano": 6}]},
        {"id": "untimed", "calls": [{"name": "a", "start_time_unix_nano": 5}]},
    ]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    _both(compiled, batch)
    timed, untimed = (json.loads(r)["results"][0] for r in arrow_rows(compiled, batch))
    assert (timed["reason_code"], timed["positions"]) == ("TOO_SLOW", [1])
    assert "took 2,000 ms" in timed["reason"]
    assert untimed["reason_code"] == "TIMING_NOT_RECORDED"
