"""JSONL and Parquet round trips, auto-detection, read() over many files, and the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from trajgrade import importers
from trajgrade.commands import import_
from trajgrade.importers import ImportReport, jsonl, parquet
from trajgrade.v1 import trace_pb2


def _traces(count: int) -> list[trace_pb2.Trace]:
    out = []
    for n in range(count):
        trace = trace_pb2.Trace(id=f"t{n}", final_answer=f"answer {n} ✓")
        trace.metadata["n"] = str(n)
        trace.calls.add(
            name="a",
            arguments_json=f'{{"n":{n}}}',
            result="r",
            id="c",
            start_time_unix_nano=2**63 + n,
            end_time_unix_nano=2**64 - 1,
        )
        trace.calls.add(name="b")  # arguments not recorded, no result
        trace.calls.add(name="c", arguments_json="", error=True)  # "" means {}
        out.append(trace)
    return out


def test_jsonl_round_trip(tmp_path: Path) -> None:
    traces = _traces(5)
    path = tmp_path / "t.jsonl"
    with path.open("w") as out:
        jsonl.write(traces, out)
    first = json.loads(path.read_text().splitlines()[0])
    assert "final_answer" in first  # snake_case field names, as the conformance cases use
    assert importers.detect_format(path) == "jsonl"
    assert list(importers.read(path)) == traces
    assert not first["calls"][1].get("arguments_json")


def test_parquet_round_trip_streams_batches(tmp_path: Path) -> None:
    traces = _traces(25)
    path = tmp_path / "t.parquet"
    parquet.write(traces, path, batch_rows=4)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 1
    report = ImportReport()
    got = list(importers.read(path, report=report, batch_rows=3))
    assert got == traces
    assert not got[0].calls[1].HasField("arguments_json")
    assert got[0].calls[2].arguments_json == ""
    assert report.total_unmapped == 0


def test_parquet_unknown_columns_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "extra.parquet"
    table = pa.table({"id": ["x"], "calls": [[{"name": "a", "extra": 1}]], "score": [0.5]})
    pq.write_table(table, path)
    report = ImportReport()
    [trace] = importers.read(path, report=report)
    assert trace.calls[0].name == "a"
    assert report.unmapped == {"UNKNOWN_COLUMN": 2}


def test_jsonl_bad_line_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(jsonl.dumps(_traces(1)[0]) + '\n{"calls": [{"bogus": 1}]}\n')
    report = ImportReport()
    assert len(list(importers.read(path, "jsonl", report=report))) == 1
    assert report.unmapped == {"INVALID_RECORD": 1}


def test_read_many_files_and_unknown_format(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.parquet"
    a.write_text(jsonl.dumps(_traces(1)[0]) + "\n")
    parquet.write(_traces(2), b)
    assert [t.id for t in importers.read([a, b])] == ["t0", "t0", "t1"]
    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a known trace format"):
        list(importers.read(odd))
    with pytest.raises(ValueError, match="unknown format"):
        list(importers.read(a, "xml"))


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    import_.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_writes_native_traces_and_summary(
    tau_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "traces.jsonl"
    assert (
        _cli(
            [
                "import",
                str(tau_bench),
                "--format",
                "openai",
                "--error-prefix",
                "Error:",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200
    assert "arguments_json" in lines[0] and "argumentsJson" not in lines[0]
    err = capsys.readouterr().err
    assert "imported 200 trace(s) with 1164 tool call(s)" in err
    assert next(iter(importers.read(out))).calls[0].name == "get_user_details"


def test_cli_reports_unmapped_and_fails_on_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "chat.json"
    src.write_text(json.dumps([{"role": "tool", "tool_call_id": "x", "content": "?"}]))
    out = tmp_path / "o.jsonl"
    # A trace is written, but not one call was mapped: that is a failed import.
    assert _cli(["import", str(src), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "TOOL_RESULT_WITHOUT_CALL x1" in err
    assert "no tool call mapped" in err
    empty = tmp_path / "none.jsonl"
    empty.write_text("\n")
    assert _cli(["import", str(empty), "--format", "jsonl", "--out", str(out)]) == 1
    assert _cli(["import", str(tmp_path / "missing.json"), "--out", str(out)]) == 2
