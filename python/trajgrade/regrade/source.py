"""Trace sources: input files read in bounded chunks of serialized Traces, resumable by position."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from trajgrade import _core
from trajgrade.regrade import arrowcols
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.tracejson import (
    TraceJsonError,
    peek_trace_id,
    trace_bytes,
    trace_bytes_from_dict,
)

FORMATS = ("auto", "jsonl", "parquet", "otlp", "openai", "anthropic")
# Bytes of native JSONL read at a time for the core's block grading (a line longer than this
# doubles the read): a chunk is at most this much, however many traces chunk_size allows.
READ_BYTES = 16 << 20
# Keys of a native trace line; a first line with other keys is left to the importers.
_NATIVE_KEYS = frozenset({"id", "calls", "final_answer", "finalAnswer", "metadata"})


class SourceError(Exception):
    """An input cannot be read at all (missing file, unknown format, no importer)."""


@dataclass(frozen=True)
class ReadFailure:
    """One input record that is not a valid trace; it becomes that row's INVALID_TRACE error."""

    trace_id: str
    field: str
    message: str


@dataclass(frozen=True)
class Position:
    """Where reading resumes: file index, offset in that file (bytes or rows), traces so far."""

    file: int = 0
    offset: int = 0
    traces: int = 0

    def to_json(self) -> dict[str, int]:
        return {"file": self.file, "offset": self.offset, "traces": self.traces}

    @classmethod
    def from_json(cls, raw: dict[str, int]) -> Position:
        return cls(raw["file"], raw["offset"], raw["traces"])


@dataclass
class Chunk:
    """Consecutive input records in input order and the position just after the last one."""

    items: list[bytes | ReadFailure]
    end: Position
    bytes_read: int = 0
    index: int = 0
    # Filled in by the grading stage: one TraceOutcome (bytes) per item.
    outcomes: list[bytes] = field(default_factory=list)
    # Raw input (read_chunks(raw_input=True)) that the core reads itself, `count` traces and
    # no items: native JSONL (or Parquet rows as JSON lines, arrowjson) as the whole lines
    # block[start:stop], or a Parquet record batch with its Arrow buffers (arrowcols).
    # first_line is the line (unit "line") or row (unit "row") number of the first one, 0
    # when unknown (after a JSONL resume). The grading stage fills `rows` with one bytes of
    # every JSONL result row (docs/regrade.md), `graded` with the core's JsonlBlock (counts
    # and marks) and `fixed` with the rewritten row of each error row, by item.
    source: str = ""
    unit: str = "line"
    first_line: int = 0
    count: int = 0
    block: bytes | None = None
    start: int = 0
    stop: int = 0
    batch: Any = None
    arrow_columns: dict[str, arrowcols.Buffers] | None = None
    rows: list[bytes] | None = None
    graded: Any = None
    fixed: dict[int, bytes] = field(default_factory=dict)

    @property
    def raw(self) -> bool:
        """Raw input for the core (a block or an Arrow batch), not items."""
        return self.block is not None or self.arrow_columns is not None

    @property
    def traces(self) -> int:
        """Traces (and read failures) in this chunk."""
        return self.count if self.raw else len(self.items)

    def where(self, i: int, line: int | None = None) -> str:
        """The error `field` of raw item i (at line index `line` of a block, which counts
        blank lines): `file:line N` / `file:row N`, or `file:trace N` after a JSONL resume."""
        if self.first_line > 0:
            return f"{self.source}:{self.unit} {self.first_line + (i if line is None else line)}"
        return f"{self.source}:trace {self.end.traces - self.traces + i + 1}"


@dataclass(frozen=True)
class InputFile:
    """One input and the format it is read as."""

    path: str
    format: str
    size: int
    mtime_ns: int

    def identity(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "size": self.size}


def detect_format(path: str, requested: str) -> str:
    """The concrete format of one input: native jsonl/parquet or an importer's format."""
    if requested != "auto":
        return requested
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson")):
        with open(path, "rb") as handle:
            for line in handle:
                if line.strip():
                    try:
                        first = json.loads(line)
                    except ValueError:
                        return "jsonl"  # reported per line, as INVALID_TRACE rows
                    native = isinstance(first, dict) and set(first) <= _NATIVE_KEYS
                    return "jsonl" if native else "auto"
        return "jsonl"
    return "auto"  # the importers sniff OTLP / OpenAI / Anthropic themselves


def resolve_inputs(paths: Sequence[str], requested: str) -> list[InputFile]:
    """Stat and classify every input; raises SourceError for a missing file."""
    if requested not in FORMATS:
        raise SourceError(f"unknown format {requested!r}; expected one of {', '.join(FORMATS)}")
    files = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise SourceError(f"{path}: {exc.strerror}") from None
        files.append(
            InputFile(
                os.path.abspath(path),
                detect_format(path, requested),
                stat.st_size,
                stat.st_mtime_ns,
            )
        )
    return files


def _read_at(handle: BinaryIO, offset: int, size: int) -> tuple[bytes, bool]:
    """Up to `size` bytes from `offset`, and whether the file ended within them."""
    handle.seek(offset)
    pieces: list[bytes] = []
    while size:
        piece = handle.read(size)
        if not piece:
            return b"".join(pieces), True
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces), False


def _jsonl_blocks(
    file: InputFile, offset: int, chunk_size: int
) -> Iterator[tuple[bytes, int, int, int, int]]:
    """(block, start, stop, traces, lines) per chunk of a native JSONL file: the whole lines
    block[start:stop] holding at most chunk_size traces, and how many lines they are.

    The file is read READ_BYTES at a time; a line cut by the end of a read is read again
    with the next one (a seek, not a copy), and a line longer than a read doubles the read.
    """
    size = READ_BYTES
    with open(file.path, "rb", buffering=0) as handle:
        while True:
            block, eof = _read_at(handle, offset, size)
            start = 0
            while True:
                consumed, traces, lines = _core.split_jsonl(block, start, chunk_size, eof)
                if not consumed:
                    break
                yield block, start, start + consumed, traces, lines
                start += consumed
            if eof:
                return
            if not start:
                size *= 2  # no whole line in this read
            offset += start


def _jsonl_block_chunks(
    file: InputFile, index: int, offset: int, chunk_size: int, traces: int
) -> Iterator[Chunk]:
    """The block chunks (Chunk.block) of native JSONL file `index`, from `offset` on."""
    name = Path(file.path).name
    line = 0 if offset == 0 else -1  # line numbers are exact only from the start
    for block, first, stop, count, lines in _jsonl_blocks(file, offset, chunk_size):
        traces += count
        offset += stop - first
        yield Chunk(
            [], Position(index, offset, traces), stop - first, source=name, count=count,
            first_line=max(line + 1, 0), block=block, start=first, stop=stop,
        )  # fmt: skip
        if line >= 0:
            line += lines


def _jsonl(
    file: InputFile, index: int, offset: int, chunk_size: int, traces: int
) -> Iterator[tuple[list[bytes | ReadFailure], int, int]]:
    """(items, end offset, bytes read) per chunk of a native JSONL file."""
    with open(file.path, "rb") as handle:
        handle.seek(offset)
        items: list[bytes | ReadFailure] = []
        start = offset
        line_no = 0 if offset == 0 else -1  # line numbers are exact only from the start
        for line in handle:
            offset += len(line)
            if line_no >= 0:
                line_no += 1
            if not line.strip():
                continue
            try:
                items.append(trace_bytes(line))
            except TraceJsonError as exc:
                where = f"line {line_no}" if line_no > 0 else f"trace {traces + len(items) + 1}"
                items.append(
                    ReadFailure(peek_trace_id(line), f"{Path(file.path).name}:{where}", str(exc))
                )
            if len(items) >= chunk_size:
                yield items, offset, offset - start
                traces += len(items)
                items, start = [], offset
        if items:
            yield items, offset, offset - start


def _parquet_row(row: dict[str, Any]) -> dict[str, Any]:
    metadata = row.get("metadata")
    if isinstance(metadata, list):  # Arrow map<string,string> comes back as (key, value) pairs
        row["metadata"] = dict(metadata)
    return row


def _batches(
    path: str, groups: list[int], chunk_size: int, columns: list[str] | None
) -> Iterator[Any]:
    """The record batches of these row groups, one row group at a time.

    Peak RSS stays flat however many row groups the file has: a fresh reader per row group
    (one long-lived reader's decode buffers keep growing), and Arrow's pool (mimalloc by
    default) hands freed buffers back after every batch. Batches do not span row groups.
    """
    import pyarrow as pa  # noqa: PLC0415  (optional dependency)
    import pyarrow.parquet as pq  # noqa: PLC0415

    pool = pa.default_memory_pool()
    for group in groups:
        reader = pq.ParquetFile(path)
        for batch in reader.iter_batches(
            batch_size=chunk_size, row_groups=[group], columns=columns
        ):
            pool.release_unused()
            yield batch
        reader.close()


def _parquet(
    file: InputFile, offset: int, chunk_size: int, raw_input: bool = False
) -> Iterator[tuple[list[bytes | ReadFailure], int, int, dict[str, Any] | None]]:
    """(items, end row, bytes read, raw) per chunk of a Parquet file with one row per trace;
    raw (with raw_input, for layouts the core reads) is the raw Chunk's fields: the batch and
    its arrowcols buffers, or its rows as a block of JSON lines (arrowjson); else None."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (optional dependency)

    parquet = pq.ParquetFile(file.path)
    meta = parquet.metadata
    # Start at the row group holding `offset`, then drop the rows before it.
    first_group, row = 0, 0
    while (
        first_group < meta.num_row_groups and row + meta.row_group(first_group).num_rows <= offset
    ):
        row += meta.row_group(first_group).num_rows
        first_group += 1
    groups = list(range(first_group, meta.num_row_groups))
    if not groups:
        return
    per_row = file.size / max(meta.num_rows, 1)
    binary = "trace" in parquet.schema_arrow.names
    columns = ["trace"] if binary else None
    for batch in _batches(file.path, groups, chunk_size, columns):
        if row + batch.num_rows <= offset:
            row += batch.num_rows
            continue
        skip = max(offset - row, 0)
        part = batch.slice(skip)
        row += skip
        items: list[bytes | ReadFailure] = []
        raw: dict[str, Any] | None = None
        if raw_input and not binary:
            buffers = arrowcols.columns(part)
            if buffers is not None:
                raw = {"batch": part, "arrow_columns": buffers}
            elif (lines := json_lines(part)) is not None:
                block = b"\n".join(lines) + b"\n"  # a JSON line holds no raw newline
                raw = {"block": block, "stop": len(block)}
        if raw is not None:
            row += part.num_rows
            yield [], row, int(part.num_rows * per_row), raw
            continue
        if binary:
            items.extend(
                value if value is not None else b"" for value in part.column(0).to_pylist()
            )
        else:
            for number, record in enumerate(part.to_pylist(), start=row + 1):
                try:
                    items.append(trace_bytes_from_dict(_parquet_row(record)))
                except TraceJsonError as exc:
                    trace_id = record.get("id") if isinstance(record.get("id"), str) else ""
                    items.append(
                        ReadFailure(trace_id, f"{Path(file.path).name}:row {number}", str(exc))
                    )
        row += part.num_rows
        yield items, row, int(part.num_rows * per_row), None


def _imported(
    file: InputFile, offset: int, chunk_size: int
) -> Iterator[tuple[list[bytes | ReadFailure], int, int]]:
    """(items, end trace, bytes read) per chunk of a file read by trajgrade.importers."""
    try:
        from trajgrade.importers import read  # noqa: PLC0415  (a colleague's package)
    except ImportError as exc:
        raise SourceError(
            f"{file.path}: format {file.format!r} needs trajgrade.importers ({exc})"
        ) from None
    count = 0
    items: list[bytes | ReadFailure] = []
    for trace in read(file.path, format=file.format):
        count += 1
        if count <= offset:
            continue  # importers have no seek: resuming re-reads and skips what is done
        items.append(trace.SerializeToString())
        if len(items) >= chunk_size:
            yield items, count, 0
            items = []
    if items:
        yield items, count, 0


def read_chunks(
    files: Sequence[InputFile],
    chunk_size: int,
    start: Position | None = None,
    *,
    raw_input: bool = False,
) -> Iterator[Chunk]:
    """Every input record in order, in chunks of at most chunk_size, starting after `start`.

    With raw_input, native JSONL and Parquet in a layout the core reads come as raw chunks
    (Chunk.raw) for a backend that grades them in the core (Grader.grade_jsonl_block,
    grade_arrow_block); everything else as items of serialized Traces.
    """
    start = start or Position()
    traces = start.traces
    for index in range(start.file, len(files)):
        file = files[index]
        offset = start.offset if index == start.file else 0
        if file.format == "jsonl" and raw_input:
            for chunk in _jsonl_block_chunks(file, index, offset, chunk_size, traces):
                traces = chunk.end.traces
                yield chunk
            continue
        if file.format == "jsonl":
            parts = _jsonl(file, index, offset, chunk_size, traces)
        elif file.format == "parquet":
            name, row = Path(file.path).name, offset
            for items, end, read, raw in _parquet(file, offset, chunk_size, raw_input):
                if raw is None:
                    traces += len(items)
                    yield Chunk(items, Position(index, end, traces), read)
                else:
                    traces += end - row
                    yield Chunk(
                        [], Position(index, end, traces), read, source=name, unit="row",
                        first_line=row + 1, count=end - row, **raw,
                    )  # fmt: skip
                row = end
            continue
        else:
            parts = _imported(file, offset, chunk_size)
        for items, end, read in parts:
            traces += len(items)
            yield Chunk(items, Position(index, end, traces), read)
