"""The local engine: rows equal the library's per-trace grade, in input order, both formats."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import trajgrade
from google.protobuf import json_format
from trajgrade.commands import regrade as regrade_command
from trajgrade.regrade import read_rows, regrade
from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import ROW_FIELDS, arrow_schema
from trajgrade.regrade.source import Chunk
from trajgrade.v1 import result_pb2, trace_pb2


def _expected(workload: dict[str, Path]) -> list[dict[str, object]]:
    compiled = trajgrade.compile_suite(str(workload["suite"]))
    rows = []
    for line in workload["clean"].read_text(encoding="utf-8").splitlines():
        trace = json_format.Parse(line, trace_pb2.Trace())
        result = compiled.grade(trace)
        rows.append(
            json_format.MessageToDict(
                result,
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            )
        )
    return rows


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_rows_equal_per_trace_grade(workload: dict[str, Path], tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"results.{suffix}"
    summary = regrade([str(workload["clean"])], workload["suite"], str(out), chunk_size=97)
    expected = _expected(workload)
    rows = list(read_rows(str(out)))
    assert len(rows) == len(expected) == summary.traces == 600
    for row, want in zip(rows, expected, strict=True):
        assert row["error"] is None
        assert {k: row[k] for k in want} == want
    if suffix == "jsonl":
        # Each JSONL line is the protobuf JSON of a GradeResult and parses back as one.
        first = out.read_text(encoding="utf-8").splitlines()[0]
        parsed = json_format.MessageToDict(
            json_format.Parse(first, result_pb2.GradeResult()),
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )
        assert parsed == json.loads(first)
        # Keys in protobuf field order, scores included (SPEC §13).
        assert list(json.loads(first)) == [f for f in ROW_FIELDS if f != "error"]
        assert list(json.loads(first)["results"][0])[-1] == "score"
    else:
        assert pq.read_schema(out).remove_metadata() == arrow_schema().remove_metadata()
    assert not (tmp_path / f"results.{suffix}.parts").exists()


def test_bad_line_is_an_item_error_in_place(workload: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    summary = regrade([str(workload["jsonl"])], workload["suite"], str(out), chunk_size=64)
    rows = list(read_rows(str(out)))
    assert len(rows) == 601 and summary.errors == 1
    bad = rows[101]
    assert bad["trace_id"] == "broken"
    assert bad["error"]["reason_code"] == "INVALID_TRACE"
    assert bad["error"]["field"] == "traces.jsonl:line 102"
    assert [r["trace_id"] for r in rows[:101]] == [f"t{i:08d}" for i in range(101)]


def test_parquet_input_equals_jsonl_input(workload: dict[str, Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    regrade([str(workload["clean"])], workload["suite"], str(a), chunk_size=50)
    regrade([str(workload["parquet"])], workload["suite"], str(b), chunk_size=50)
    assert a.read_bytes() == b.read_bytes()


def test_cli_min_pass_rate_and_summary(
    workload: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.jsonl"
    args = [str(workload["clean"]), "--suite", str(workload["suite"]), "--out", str(out)]
    assert regrade_command.main([*args, "--min-pass-rate", "0.0"]) == 0
    printed = capsys.readouterr().out
    assert "tool_sequence" in printed and "pass rate" in printed
    assert regrade_command.main([*args, "--min-pass-rate", "0.99"]) == 1
    assert regrade_command.main([*args[:-1], str(tmp_path / "r.csv")]) == 2
    assert regrade_command.main(["missing.jsonl", *args[1:]]) == 2


def test_parquet_output_from_the_core_columns_equals_the_json_reader(
    workload: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet output written from the core's Arrow columns reads back equal to the output of
    the rows read by Arrow's JSON reader (the path before), bad line included, for JSONL and
    Parquet input."""
    grade = LocalBackend.grade

    def json_rows_grade(backend: LocalBackend, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        backend.arrow = False  # every row as JSONL, no columns: Arrow's JSON reader reads them
        return grade(backend, chunks)

    for source in ("jsonl", "parquet"):
        core = tmp_path / f"core-{source}.parquet"
        regrade([str(workload[source])], workload["suite"], str(core), chunk_size=64)
        with monkeypatch.context() as m:
            m.setattr(LocalBackend, "grade", json_rows_grade)
            reader = tmp_path / f"json-{source}.parquet"
            regrade([str(workload[source])], workload["suite"], str(reader), chunk_size=64)
        assert pq.read_table(core).equals(pq.read_table(reader))
        assert pq.read_table(core).num_rows == (601 if source == "jsonl" else 600)
