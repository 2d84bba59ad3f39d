"""Native JSONL graded by the block (Grader.grade_jsonl_block, source READ_BYTES reads): the
same graded rows as the row-by-row path (Python decode), error rows written by the core
(`file:line N`, the core's message), whatever the chunk and read sizes, on files with bad,
blank, CRLF and unterminated lines; the block's counts and marks, and Summary.add_block
against rows counted one by one (regrade_reference)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regrade_workload
from google.protobuf import json_format
from regrade_reference import counted, without_messages
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, read_rows, regrade, source
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import row_from_json
from trajgrade.regrade.summary import Summary
from trajgrade.suites import load_suite
from trajgrade.v1 import result_pb2, trace_pb2

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
    bytes: the reference for the core's blocks' graded rows (its error rows word the Python
    decoder's messages)."""
    monkeypatch.setattr(LocalBackend, "raw_input", False)


def _counts(summary: Summary) -> dict[str, object]:
    """A summary's counts and sampled traces, without the sampled errors' messages."""
    state = summary.to_json()
    state["failures"] = [f["trace_id"] for f in state["failures"]]
    return state


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
        assert _counts(blocks) == _counts(lines)
        got = list(read_rows(str(tmp_path / f"b.{suffix}")))
        assert without_messages(got) == without_messages(read_rows(str(tmp_path / f"l.{suffix}")))
        if suffix == "jsonl":
            ours = (tmp_path / "b.jsonl").read_bytes().splitlines()
            theirs = (tmp_path / "l.jsonl").read_bytes().splitlines()
            assert [r for r in ours if b'"error":{' not in r] == [
                r for r in theirs if b'"error":{' not in r
            ]
    # The summary is also the one counted row by row from the output.
    assert blocks.to_json() == counted(got, blocks.suite_id).to_json()
    assert blocks.traces == 400 + 11 and blocks.errors == 9  # two broken lines only nest deep
    assert blocks.failed > 0 and blocks.soft_failures > 0
    # Error rows name the file and the line (blank lines and CRLF ends counted).
    file_lines = data.read_bytes().split(b"\n")
    for row in got:
        if row["error"] is not None:
            where = re.match(r"messy\.jsonl:line (\d+)", row["error"]["field"])
            assert where is not None, row["error"]
            assert file_lines[int(where[1]) - 1] in _BROKEN
    # The core's own messages (serde_json's), not json_format's.
    messages = {row["trace_id"]: row["error"]["message"] for row in got if row["error"]}
    assert messages["broken"] == (
        "invalid type: integer `5`, expected a sequence at line 1 column 27"
    )


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
    block = grader.grade_jsonl_block(suite, data, start, len(data), 3, "messy.jsonl", 2)
    # The rows of the lines one by one, with the error rows' field (`lines[i]`) naming the
    # file and line (blank lines counted).
    numbers = [
        n
        for n, line in enumerate(data[start:].split(b"\n"), start=2)
        if line and not line.isspace()
    ]
    rows = [
        row.replace(b'"field":"lines[%d]' % i, b'"field":"messy.jsonl:line %d' % numbers[i], 1)
        for i, row in enumerate(bench.grade_json_traces_to_json(suite, lines))
    ]
    assert block.rows == b"".join(rows) and block.items == len(rows) == len(lines)
    parsed = [row_from_json(json.loads(row)) for row in rows]
    graded = [row for row in parsed if row["error"] is None]
    errors = [row["error"] for row in parsed if row["error"] is not None]
    assert block.errors == len(errors) > 0
    codes: dict[str, int] = {}
    for error in errors:
        codes[error["reason_code"]] = codes.get(error["reason_code"], 0) + 1
        assert re.fullmatch(r"messy\.jsonl:line \d+(\..*)?", error["field"]), error
    assert dict(block.error_codes) == codes and len(codes) == len(block.error_codes)
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
    error_items = [i for i, row in enumerate(parsed) if row["error"] is not None]
    failing = [i for i, row in enumerate(parsed) if row["error"] is None
               and row["verdict"] != "VERDICT_PASS"][:3]  # fmt: skip
    marks = block.marks
    assert [m.item for m in marks] == sorted(error_items + failing)
    assert [m.item for m in marks if m.error] == error_items
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row))
    for m in marks:
        assert (m.row_start, m.row_end) == (offsets[m.item], offsets[m.item + 1])


def test_block_ranges_are_checked(workload: dict[str, Path]) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    with pytest.raises(ValueError, match="outside the 3 bytes"):
        grader.grade_jsonl_block(suite, b"{}\n", 2, 4, 0, "f")
    with pytest.raises(ValueError, match="outside"):
        grader.grade_jsonl_block(suite, b"{}\n", 3, 2, 0, "f")
    with pytest.raises(ValueError, match="outside"):
        _core.split_jsonl(b"{}\n", 4, 1, True)
    with pytest.raises(ValueError, match='unknown unit "page"'):
        grader.grade_jsonl_block(suite, b"{}\n", 0, 3, 0, "f", 1, "page")
    with pytest.raises(ValueError, match="from 1"):
        grader.grade_jsonl_block(suite, b"{}\n", 0, 3, 0, "f", 0)
    empty = grader.grade_jsonl_block(suite, b"\n \n", 0, 3, 0, "f")
    assert (empty.rows, empty.items, empty.marks, empty.errors) == (b"", 0, [], 0)
    # The unit names the field: lines count blank lines, rows and traces count items.
    data = b"\n5\n\n6\n"
    for unit, want in [("line", ["f:line 8", "f:line 10"]), ("row", ["f:row 7", "f:row 8"]),
                       ("trace", ["f:trace 7", "f:trace 8"])]:  # fmt: skip
        block = grader.grade_jsonl_block(suite, data, 0, len(data), 0, "f", 7, unit)
        fields = [json.loads(row)["error"]["field"] for row in block.rows.splitlines()]
        assert fields == want and block.error_codes == [("INVALID_TRACE", 2)]


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
    merged = Summary(suite_id=suite.suite_id, failure_sample=sample)
    rows = []
    for start in range(0, len(lines), per_block):
        if start // per_block == len(lines) // per_block // 2:  # resumed from the manifest
            merged = Summary.from_json(json.loads(json.dumps(merged.to_json())))
        data = b"".join(lines[start : start + per_block])
        # As the pipeline does: no failing rows marked once the sample is full.
        max_failing = 0 if merged.sample_full else sample
        block = grader.grade_jsonl_block(suite, data, 0, len(data), max_failing, "m", start + 1)
        merged.add_block(block)
        rows += [row_from_json(json.loads(row)) for row in block.rows.splitlines()]
    reference = counted(rows, suite.suite_id, sample)
    assert merged.to_json() == reference.to_json()
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
    assert _counts(raw) == _counts(items)
    got = list(read_rows(str(tmp_path / "raw.jsonl")))
    assert without_messages(got) == without_messages(read_rows(str(tmp_path / "items.jsonl")))
    error = [r["error"] for r in got if r["error"] is not None]
    assert len(error) == 1 and error[0]["field"] == "t.parquet:row 8"
    # The core's decoder's message (pbjson's wording for a negative uint64), not json_format's.
    assert error[0]["message"].startswith("data did not match any variant"), error


def test_arrow_block_is_the_arrow_rows_joined(workload: dict[str, Path]) -> None:
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    traces = list(regrade_workload.iter_trace_dicts(100, seed=4))
    batch = pa.RecordBatch.from_pylist(traces, schema=SCHEMA)
    columns = arrowcols.columns(batch)
    assert columns is not None
    rows = regrade_workload.arrow_rows(suite, batch)
    assert rows is not None
    block = grader.grade_arrow_block(suite, batch.num_rows, columns, 3, "t.parquet", 5)
    assert block.rows == b"".join(rows) and block.items == len(rows) == 100
    failing = [i for i, row in enumerate(rows) if b'"verdict":"VERDICT_PASS"' not in row]
    assert [m.item for m in block.marks] == failing[:3]
    for m in block.marks:
        assert not m.error
        assert block.rows[m.row_start : m.row_end] == rows[m.item]
    assert block.passed + block.failed == 100 and block.failed == len(failing)


def _fixture_lines(workload: dict[str, Path], tmp_path: Path) -> list[bytes]:
    """Every native trace line of the existing fixtures: the workload (with its broken line),
    the messy file (bad, deep, odd and non-ASCII lines) and the conformance cases' traces."""
    lines = _lines(workload["jsonl"].read_bytes())
    lines += _lines(_messy(tmp_path / "m.jsonl").read_bytes())
    cases = Path(__file__).resolve().parents[1] / "conformance" / "cases.jsonl"
    for case in cases.read_text(encoding="utf-8").splitlines():
        lines.append(json.dumps(json.loads(case)["trace"]).encode() + b"\n")
    return lines


def test_the_core_accepts_the_lines_the_python_path_accepted(
    workload: dict[str, Path], tmp_path: Path
) -> None:
    """The core's decoder words its own errors now (no Python re-decode of the lines it
    rejects), so over the fixtures it must accept exactly the lines the Python path (upb,
    json_format) accepted, or a line once graded would become an error row."""
    grader = _core.Grader()
    suite = grader.compile_suite(load_suite(str(workload["suite"])).SerializeToString())
    lines = _fixture_lines(workload, tmp_path)
    outcomes = bench.grade_json_traces(suite, lines)
    differ = []
    for line, outcome in zip(lines, outcomes, strict=True):
        decoded = result_pb2.TraceOutcome.FromString(outcome)
        core = decoded.WhichOneof("outcome") == "result"
        core |= decoded.error.reason_code not in ("", "INVALID_TRACE")
        try:
            json_format.Parse(line, trace_pb2.Trace())
            python = True
        except (json_format.ParseError, UnicodeDecodeError):  # the reference refuses it
            python = False
        if core != python:
            differ.append((line[:80], core, python))
    assert len(lines) > 1000 and differ == []
