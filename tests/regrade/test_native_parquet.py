"""Native-schema Parquet files read by the core's reader (`_core.ParquetTraces`): the same rows
as pyarrow's reader gives, byte for byte, for every codec pyarrow writes, row-group layout,
resume position and output format; other files are left to pyarrow, with the reason."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trajgrade
from regrade_reference import large_schema
from trajgrade import _core
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, regrade, source
from trajgrade.regrade.source import ArrowChunk, Position, SourceError, resolve_inputs
from trajgrade.v1.trace_pb2 import Trace

_ROWS: list[dict[str, Any]] = [
    {
        "id": 'we"ird\\\u0001é\n',
        "calls": [
            {"name": "get_user", "arguments_json": "", "result": None, "error": True, "id": "c1",
             "start_time_unix_nano": 2**64 - 1, "end_time_unix_nano": None, "turn": 2,
             "agent": "billing", "server": "crm"},
            {"name": None, "arguments_json": '{"q": "\\"ü\\"\\n", "n": [1, 2.5e3]}'},
            {"name": "search", "arguments_json": "{not json", "result": "ok \U0001f600",
             "error": None, "turn": None},
        ],
        "final_answer": "tab\there",
        "metadata": [("k\"", "v\\"), ("a", ""), ("k\"", "later")],
        "model_calls": [
            {"model": "m", "input_tokens": 30_000, "output_tokens": 5, "cost": 0.5, "turn": 1},
            {"model": None, "input_tokens": None, "cost": None, "agent": "planner",
             "start_time_unix_nano": 7, "end_time_unix_nano": 9},
        ],
        "turns": [{"user_input": "refund", "final_answer": "done"}, {"user_input": None}],
    },
    {"id": None, "calls": None, "final_answer": None, "metadata": None, "model_calls": None,
     "turns": None},
    {"id": "z", "calls": [], "final_answer": "", "metadata": [], "model_calls": [], "turns": []},
    {"id": "日本", "calls": [{"name": "search", "arguments_json": '{"query": "x"}'}] * 3,
     "final_answer": "done", "metadata": [("env", "prod")]},
]  # fmt: skip

_SUITE = {
    "assertions": [
        {"tool_called": {"tool": "search"}},
        {"tool_call_args": {"tool": "search",
                            "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"query": "x"}'}}},
        {"step_count": {"max": 2}},
        {"budget": {"max_total_tokens": 40000}},
        {"expression": {"expr": "size(calls) == 0 || calls[0].agent == 'billing'"}},
    ]
}  # fmt: skip


@pytest.fixture
def suite_path(tmp_path: Path) -> Path:
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(_SUITE), encoding="utf-8")
    return path


def _write(path: Path, schema: pa.Schema, copies: int, **options: Any) -> Path:
    table = pa.Table.from_pylist(_ROWS * copies, schema=schema)
    pq.write_table(table, path, **options)
    return path


def _regrade_both(
    inputs: list[Path], suite: Path, out: Path, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> tuple[bytes, bytes]:
    """The output of regrade through the core's reader, and through pyarrow only."""
    native = out.with_name("native" + out.suffix)
    regrade([str(p) for p in inputs], suite, str(native), **options)
    with monkeypatch.context() as m:
        m.setattr(source, "_native_reader", lambda path: None)
        pyarrow_out = out.with_name("pyarrow" + out.suffix)
        regrade([str(p) for p in inputs], suite, str(pyarrow_out), **options)
    return native.read_bytes(), pyarrow_out.read_bytes()


def _rows(path: Path) -> list[Any]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("schema", [SCHEMA, large_schema(SCHEMA)], ids=["string", "large"])
@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "lz4", "none"])
def test_regrade_rows_equal_pyarrow_reading(
    tmp_path: Path,
    suite_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    schema: pa.Schema,
    compression: str,
) -> None:
    path = _write(tmp_path / "t.parquet", schema, 9, row_group_size=7, compression=compression)
    reader = _core.ParquetTraces(path)
    assert reader.row_groups == [7] * 5 + [1]
    for out in ("r.jsonl", "r.parquet"):
        native, pyarrow_bytes = _regrade_both([path], suite_path, tmp_path / out, monkeypatch,
                                              chunk_size=3)  # fmt: skip
        if out.endswith(".jsonl"):
            assert native == pyarrow_bytes
        else:
            assert _rows(tmp_path / "native.parquet") == _rows(tmp_path / "pyarrow.parquet")
    rows = _rows(tmp_path / "native.jsonl")
    assert len(rows) == 36
    assert [row["trace_id"] for row in rows[:4]] == [r["id"] or "" for r in _ROWS]
    assert "TOO_MANY_STEPS" in [r["reason_code"] for r in rows[0]["results"]]
    assert [r["reason_code"] for r in rows[3]["results"]].count("") >= 3


def test_the_core_reads_the_batches_and_grades_them_as_pyarrow_buffers(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet", SCHEMA, 6, row_group_size=10)
    files = resolve_inputs([str(path)], "auto")
    chunks = list(source.read_chunks(files, 4, raw_input=True))
    assert all(isinstance(c, ArrowChunk) for c in chunks)
    assert all(isinstance(c.columns, _core.ArrowBatch) for c in chunks)
    assert [c.end.offset for c in chunks] == [4, 8, 10, 14, 18, 20, 24]
    assert [c.first_line for c in chunks] == [1, 5, 9, 11, 15, 19, 21]
    grader = _core.Grader(threads=1)
    suite = grader.compile_suite(trajgrade.load_suite(_SUITE).SerializeToString())
    table = pq.read_table(path)
    for chunk in chunks:
        assert isinstance(chunk.columns, _core.ArrowBatch)
        start = chunk.first_line - 1
        part = table.slice(start, chunk.count).combine_chunks().to_batches()[0]
        buffers = arrowcols.columns(part)
        assert buffers is not None
        got = grader.grade_arrow_block(suite, chunk.count, chunk.columns, 10, "t", chunk.first_line)
        want = grader.grade_arrow_block(suite, chunk.count, buffers, 10, "t", chunk.first_line)
        assert got.rows == want.rows and got.passed == want.passed
        with pytest.raises(ValueError, match="rows is 1, the batch has"):
            grader.grade_arrow_block(suite, 1, chunk.columns, 10, "t", 1)

    # For a server: the same Traces as from pyarrow's buffers (a map's entries may be
    # serialized in either order).
    def traces(chunks: list[source.Chunk]) -> list[Trace]:
        return [Trace.FromString(item) for c in chunks for item in c.items]  # type: ignore[union-attr,arg-type]

    served = list(source.read_chunks(files, 4, raw_input=False))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(source, "_native_reader", lambda p: None)
        expected = list(source.read_chunks(files, 4, raw_input=False))
    assert len(traces(served)) == 24
    assert traces(served) == traces(expected)


def test_resume_and_stop_positions_match_pyarrow(tmp_path: Path) -> None:
    """From any resume offset, to any stop: the same rows in order, each chunk's end and first
    row consistent, as pyarrow's reading gives (the chunk boundaries may differ: the core's
    reader starts its batches at the offset, pyarrow at the row group)."""
    path = _write(tmp_path / "t.parquet", SCHEMA, 10, row_group_size=6)
    files = resolve_inputs([str(path)], "auto")

    def rows(offset: int, stop: int | None) -> tuple[list[int], Position]:
        chunks = list(source.file_chunks(
            files, 0, 4, Position(0, offset, 100 + offset), raw_input=True, stop=stop
        ))  # fmt: skip
        covered: list[int] = []
        for c in chunks:
            assert isinstance(c, ArrowChunk)
            assert c.end.offset == c.first_line - 1 + c.count
            assert c.end.traces == 100 + c.end.offset
            covered += range(c.first_line - 1, c.end.offset)
        return covered, chunks[-1].end if chunks else Position()

    for offset, stop in [(0, None), (5, None), (6, None), (7, 20), (39, None), (40, None)]:
        got = rows(offset, stop)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(source, "_native_reader", lambda p: None)
            assert got == rows(offset, stop), (offset, stop)
        assert got[0][:1] == ([offset] if offset < 40 else [])


def test_other_files_are_left_to_pyarrow_with_the_reason(
    tmp_path: Path, suite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inferred = tmp_path / "inferred.parquet"  # int64 tokens and turns: pyarrow casts them
    pq.write_table(
        pa.Table.from_pylist([{"id": "a", "calls": [{"name": "x", "turn": 1}]}]), inferred
    )
    brotli = _write(tmp_path / "brotli.parquet", SCHEMA, 1, compression="brotli")
    extra = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"id": ["a"], "note": ["n"]}), extra)
    binary = tmp_path / "binary.parquet"
    pq.write_table(pa.table({"trace": [b""]}), binary)
    reasons = {}
    for path in (inferred, brotli, extra, binary):
        with pytest.raises(ValueError) as info:
            _core.ParquetTraces(path)
        reasons[path.stem] = str(info.value)
        assert source._native_reader(str(path)) is None
    assert 'column "calls"' in reasons["inferred"] and "Int64" in reasons["inferred"]
    assert reasons["brotli"] == "codec BROTLI is not built in"
    assert 'column "note"' in reasons["extra"]
    assert 'column "trace"' in reasons["binary"]
    with pytest.raises(ValueError, match=r"missing\.parquet"):
        _core.ParquetTraces(tmp_path / "missing.parquet")
    native, pyarrow_bytes = _regrade_both([inferred, brotli], suite_path, tmp_path / "r.jsonl",
                                          monkeypatch)  # fmt: skip
    assert native == pyarrow_bytes
    assert len(native.splitlines()) == 5


def test_from_a_batch_the_arrow_path_does_not_take_pyarrow_reads_the_rest(
    tmp_path: Path, suite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [dict(_ROWS[3], id=f"t{i}") for i in range(12)]
    rows[5] = {"id": "null-struct", "calls": [None, {"name": "search"}]}
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=8)
    batches = list(_core.ParquetTraces(path).batches(0, 1, 3))
    assert [b.unsupported for b in batches] == [None, "a null struct in a list", None]
    files = resolve_inputs([str(path)], "auto")
    chunks = list(source.read_chunks(files, 3, raw_input=True))
    # Row group 0 in batches of 3, 3, 2, row group 1 of 3, 1; the null struct's batch goes row
    # by row, as with pyarrow, and pyarrow's buffers carry the rest.
    kinds = [type(c).__name__ for c in chunks]
    assert kinds == ["ArrowChunk", "ItemsChunk", "ArrowChunk", "ArrowChunk", "ArrowChunk"]
    assert isinstance(chunks[0], ArrowChunk) and isinstance(chunks[0].columns, _core.ArrowBatch)
    assert all(isinstance(c, ArrowChunk) and isinstance(c.columns, dict) for c in chunks[2:])
    assert [c.end.offset for c in chunks] == [3, 6, 8, 11, 12]
    native, pyarrow_bytes = _regrade_both([path], suite_path, tmp_path / "r.jsonl", monkeypatch,
                                          chunk_size=3)  # fmt: skip
    assert native == pyarrow_bytes
    assert [json.loads(line)["trace_id"] for line in native.splitlines()][5] == "null-struct"


def test_a_damaged_page_is_a_source_error_naming_the_file(tmp_path: Path) -> None:
    rng = random.Random(1)  # distinct arguments: pages that snappy cannot shrink to nothing
    rows = [
        {"id": f"t{i}", "calls": [{"name": "s", "arguments_json": f'"{rng.getrandbits(128):x}"'}]}
        for i in range(2000)
    ]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=1000)
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 64] = b"\xff" * 64  # inside the first row group's pages
    path.write_bytes(bytes(data))
    reader = _core.ParquetTraces(path)  # the footer is intact
    with pytest.raises(ValueError, match="snappy: corrupt input"):
        for _ in reader.batches(0):
            pass
    files = resolve_inputs([str(path)], "auto")
    with pytest.raises(SourceError, match=r"t\.parquet: row group 0: .*snappy: corrupt input"):
        list(source.read_chunks(files, 100, raw_input=True))
