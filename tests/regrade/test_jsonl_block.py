"""Native JSONL graded by the block (Grader.grade_jsonl_block, source READ_BYTES reads): the
same output bytes and the same summary as the row-by-row path (Python decode, Summary.add),
whatever the chunk and read sizes, on files with bad, blank, CRLF and unterminated lines; the
block's counts and marks, and Summary.add_block against Summary.add."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regrade_workload
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, read_rows, regrade, source
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import row_from_json
from trajgrade.regrade.summary import Summary
from trajgrade.suites import load_suite

_BROKEN = [
    b'{"id": "broken", "calls": 5}',  # pbjson and json_format both reject it
    b"not json at all",
    b'{"id": "odd", "calls": [{"name": "a", "bogus": 1}]}',  # unknown field
    b'{"id": "bad-utf8-\xff", "calls": []}',
    b'{"id": "deep", "calls": [{"name": "a", "arguments_json": "' + b"[" * 200 + b'"}]}',
]


def _messy(path: Path, n: int = 400) -> Path:
    """Traces with bad lines, blank lines of every kind, CRLF ends and no final newline."""
    out = []
    for i, trace in enumerate(regrade_workload.iter_trace_dicts(n, seed=5)):
        out.append(json.dumps(trace, ensure_ascii=i % 2 == 0).encode())
        out.append(b"\r\n" if i % 17 == 0 else b"\n")
        if i % 37 == 3:
            out += [_BROKEN[(i // 37) % len(_BROKEN)], b"\n"]
        if i % 60 == 7:
            out.append(b"  \n\t\r\n\n\x0b\x0c\n")
    path.write_bytes(b"".join(out).rstrip(b"\n"))
    return path


def _row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regrade as items: each line decoded in Python (upb, json_format) and graded from Trace
    bytes, each row counted by Summary.add: the reference for the core's blocks."""
    monkeypatch.setattr(LocalBackend, "raw_input", False)


@pytest.mark.parametrize(("chunk_size", "read_bytes"), [(5, 257), (64, 4096), (5000, 16 << 20)])
def test_blocks_equal_row_by_row(
    workload: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk_size: int,
    read_bytes: int,
) -> None:
    data = _messy(tmp_path / "messy.jsonl")
    for suffix in ("jsonl", "parquet"):
        with monkeypatch.context() as m:
            m.setattr(source, "READ_BYTES", read_bytes)
            blocks = regrade([str(data)], workload["suite"], str(tmp_path / f"b.{suffix}"),
                             chunk_size=chunk_size)  # fmt: skip
        with monkeypatch.context() as m:
            _row_by_row(m)
            lines = regrade([str(data)], workload["suite"], str(tmp_path / f"l.{suffix}"),
                            chunk_size=chunk_size)  # fmt: skip
        assert blocks.to_json() == lines.to_json()
        got = list(read_rows(str(tmp_path / f"b.{suffix}")))
        assert got == list(read_rows(str(tmp_path / f"l.{suffix}")))
        if suffix == "jsonl":
            assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "l.jsonl").read_bytes()
    # The summary is also the one counted row by row from the output.
    reference = Summary(suite_id=blocks.suite_id)
    reference.add(got)
    assert blocks.to_json() == reference.to_json()
    assert blocks.traces == 400 + 11 and blocks.errors == 9  # two broken lines only nest deep
    assert blocks.failed > 0 and blocks.soft_failures > 0
    # Error rows name the file and the line (blank lines and CRLF ends counted).
    file_lines = data.read_bytes().split(b"\n")
    for row in got:
        if row["error"] is not None:
            where = re.match(r"messy\.jsonl:line (\d+)", row["error"]["field"])
            assert where is not None, row["error"]
            assert file_lines[int(where[1]) - 1] in _BROKEN


def _lines(data: bytes) -> list[bytes]:
    """The non-blank lines, each with its newline (the last one may have none)."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    return [line for line in lines if not line.isspace()]


def test_block_counts_and_marks(workload: dict[str, Path], tmp_path: Path) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    data = _messy(tmp_path / "messy.jsonl", 120).read_bytes()
    start = data.index(b"\n") + 1  # from the second line on
    lines = _lines(data[start:])
    block = grader.grade_jsonl_block(suite, data, start, len(data), 3)
    rows = bench.grade_json_traces_to_json(suite, lines)
    assert block.rows == b"".join(rows) and block.items == len(rows) == len(lines)
    parsed = [row_from_json(json.loads(row)) for row in rows]
    graded = [row for row in parsed if row["error"] is None]
    assert block.passed == sum(row["verdict"] == "VERDICT_PASS" for row in graded)
    assert block.failed == len(graded) - block.passed
    assert block.soft_failures == sum(row["soft_failures"] for row in graded)
    assert block.mean_score_units == sum(round(row["mean_score"] * 10_000) for row in graded)
    counts: dict[str, list[int]] = {}
    for row in graded:
        for r in row["results"]:
            c = counts.setdefault(r["name"], [0, 0, 0])
            c[r["status"] != "ASSERTION_STATUS_PASS"] += 1
            c[2] += round(r["score"] * 10_000)
    assert [(name, p, f, u) for name, _, p, f, u in block.assertions] == [
        (name, p, f, u) for name, (p, f, u) in counts.items()
    ]
    assert block.longest_row == max(map(len, rows))
    # Every error row is marked, failing rows only up to max_failing (3), in row order.
    errors = [i for i, row in enumerate(parsed) if row["error"] is not None]
    failing = [i for i, row in enumerate(parsed) if row["error"] is None
               and row["verdict"] != "VERDICT_PASS"][:3]  # fmt: skip
    marks = block.marks
    assert [m.item for m in marks] == sorted(errors + failing)
    assert [m.item for m in marks if m.error] == errors
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row))
    for m in marks:
        assert (m.row_start, m.row_end) == (offsets[m.item], offsets[m.item + 1])
        assert data[start + m.text_start : start + m.text_end] == lines[m.item]
        # The line index counts every line of the block, blank ones included.
        assert data[start:].split(b"\n")[m.line] == lines[m.item].removesuffix(b"\n")


def test_block_ranges_are_checked(workload: dict[str, Path]) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    with pytest.raises(ValueError, match="outside the 3 bytes"):
        grader.grade_jsonl_block(suite, b"{}\n", 2, 4, 0)
    with pytest.raises(ValueError, match="outside"):
        grader.grade_jsonl_block(suite, b"{}\n", 3, 2, 0)
    with pytest.raises(ValueError, match="outside"):
        _core.split_jsonl(b"{}\n", 4, 1, True)
    empty = grader.grade_jsonl_block(suite, b"\n \n", 0, 3, 0)
    assert (empty.rows, empty.items, empty.marks) == (b"", 0, [])


def test_split_jsonl() -> None:
    data = b'{"id":"a"}\n\n  \n{"id":"b"}\r\n{"id":"c"}'
    assert _core.split_jsonl(data, 0, 1, False) == (15, 1, 3)
    assert _core.split_jsonl(data, 0, 5, False) == (27, 2, 4)
    assert _core.split_jsonl(data, 0, 5, True) == (len(data), 3, 5)
    assert _core.split_jsonl(data, 27, 5, False) == (0, 0, 0)
    assert _core.split_jsonl(data, 27, 5, True) == (10, 1, 1)


@pytest.mark.parametrize("sample", [0, 3, 200])
@pytest.mark.parametrize("per_block", [1, 7, 64])
def test_add_block_equals_row_summary(
    workload: dict[str, Path], tmp_path: Path, sample: int, per_block: int
) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    lines = _lines(_messy(tmp_path / "messy.jsonl", 150).read_bytes())
    reference = Summary(suite_id=suite.suite_id, failure_sample=sample)
    counted = Summary(suite_id=suite.suite_id, failure_sample=sample)
    for start in range(0, len(lines), per_block):
        if start // per_block == len(lines) // per_block // 2:  # resumed from the manifest
            counted = Summary.from_json(json.loads(json.dumps(counted.to_json())))
        data = b"".join(lines[start : start + per_block])
        # As the pipeline does: no failing rows marked once the sample is full.
        max_failing = 0 if len(counted.failures) >= sample else sample
        block = grader.grade_jsonl_block(suite, data, 0, len(data), max_failing)
        fixed = {m.item: block.rows[m.row_start : m.row_end] for m in block.marks if m.error}
        counted.add_block(block, fixed)
        reference.add(row_from_json(json.loads(row)) for row in block.rows.splitlines())
    assert counted.to_json() == reference.to_json()
    assert reference.errors > 0 and reference.soft_failures > 0
    assert len(reference.failures) == min(sample, reference.failed + reference.errors)


def test_parquet_json_lines_equal_row_by_row(
    workload: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet batches the core cannot read from buffers (here a `finalAnswer` column) go as a
    block of JSON lines (arrowjson); rows and error rows (`file:row N`) as row by row."""
    rows = []
    for trace in regrade_workload.iter_trace_dicts(60, seed=9):
        trace["finalAnswer"] = trace.pop("final_answer", "")
        rows.append(trace)
    rows[7]["calls"][0]["start_time_unix_nano"] = -5  # not a uint64: INVALID_TRACE
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=25)
    batch = next(pq.ParquetFile(path).iter_batches())
    assert arrowcols.columns(batch) is None and json_lines(batch) is not None
    raw = regrade([str(path)], workload["suite"], str(tmp_path / "raw.jsonl"), chunk_size=16)
    with monkeypatch.context() as m:
        _row_by_row(m)
        items = regrade([str(path)], workload["suite"], str(tmp_path / "items.jsonl"))
    assert raw.to_json() == items.to_json()
    assert (tmp_path / "raw.jsonl").read_bytes() == (tmp_path / "items.jsonl").read_bytes()
    error = [r for r in read_rows(str(tmp_path / "raw.jsonl")) if r["error"] is not None]
    assert len(error) == 1 and error[0]["error"]["field"] == "t.parquet:row 8"


def test_arrow_block_is_the_arrow_rows_joined(workload: dict[str, Path]) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    traces = list(regrade_workload.iter_trace_dicts(100, seed=4))
    batch = pa.RecordBatch.from_pylist(traces, schema=SCHEMA)
    columns = arrowcols.columns(batch)
    assert columns is not None
    rows = regrade_workload.arrow_rows(suite, batch)
    assert rows is not None
    block = grader.grade_arrow_block(suite, batch.num_rows, columns, 3)
    assert block.rows == b"".join(rows) and block.items == len(rows) == 100
    failing = [i for i, row in enumerate(rows) if b'"verdict":"VERDICT_PASS"' not in row]
    assert [m.item for m in block.marks] == failing[:3]
    for m in block.marks:
        assert (m.line, m.text_start, m.text_end, m.error) == (m.item, 0, 0, False)
        assert block.rows[m.row_start : m.row_end] == rows[m.item]
    assert block.passed + block.failed == 100 and block.failed == len(failing)
