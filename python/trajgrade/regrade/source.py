"""Trace sources: input files read in bounded chunks of serialized Traces, resumable by position."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from trajgrade import _core
from trajgrade.importers import NATIVE_TRACE_KEYS
from trajgrade.regrade import arrowcols
from trajgrade.regrade.arrowjson import json_lines

if TYPE_CHECKING:
    from trajgrade._core import JsonlBlock

FORMATS = ("auto", "jsonl", "parquet", "otlp", "openai", "anthropic")
# Bytes of native JSONL read at a time for the core's block grading (a line longer than this
# doubles the read): a chunk is at most this much, however many traces chunk_size allows.
READ_BYTES = 16 << 20
# "pyarrow" reads every Parquet input with pyarrow, not the core's reader ("auto").
PARQUET_READER_ENV = "TRAJGRADE_PARQUET_READER"
# Fault the mapped pages in on the reader's thread, not the graders' (Linux only).
POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class SourceError(Exception):
    """An input cannot be read at all (missing file, unknown format, no importer)."""


@dataclass(frozen=True)
class ReadFailure:
    """One input record that is not a valid trace; it becomes that row's INVALID_TRACE error."""

    trace_id: str
    field: str
    message: str


def jsonl_items(
    data: bytes | mmap.mmap, start: int, end: int, origin: tuple[str, int, str]
) -> list[bytes | ReadFailure]:
    """The whole JSON lines data[start:end] decoded by the core (_core.jsonl_traces): each
    line's `Trace` bytes, or its ReadFailure worded as the local engine's error row for the
    origin (source, first, unit) of the lines."""
    decoded = _core.jsonl_traces(data, start, end, *origin)
    return [item if isinstance(item, bytes) else ReadFailure(*item) for item in decoded]


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


@dataclass(kw_only=True)
class ItemsChunk:
    """Consecutive input records as serialized Traces (read failures in place), for
    CompiledSuite.grade_batch or a server; the grading stage fills `outcomes`, one TraceOutcome
    a trace, then `graded` (the core's rows and counts of them: _core.outcome_block)."""

    items: list[bytes | ReadFailure]
    end: Position  # the position just after the last record
    bytes_read: int = 0
    outcomes: list[bytes] = field(default_factory=list)
    graded: JsonlBlock | None = None

    @property
    def traces(self) -> int:
        """Traces (and read failures) in this chunk."""
        return len(self.items)

    def block(self, suite_id: str, max_failing: int, arrow: bool = False) -> JsonlBlock:
        """The rows and counts of the graded chunk, written by the core (and as Arrow columns
        if `arrow`): each trace's outcome, each read failure as its INVALID_TRACE row, in input
        order."""
        outcomes = iter(self.outcomes)
        items: list[bytes | tuple[str, str, str]] = [
            (item.trace_id, item.field, item.message)
            if isinstance(item, ReadFailure)
            else next(outcomes)
            for item in self.items
        ]
        return _core.outcome_block(suite_id, items, max_failing, arrow)


@dataclass(kw_only=True)
class RawChunk:
    """Consecutive input records that the core reads itself, `count` traces of `source`;
    first_line is the line (unit "line") or row (unit "row") number of the first one, 0 when
    unknown (after a JSONL resume). The grading stage fills `graded` (the core's rows and
    counts)."""

    end: Position  # the position just after the last record
    bytes_read: int = 0
    source: str
    unit: str = "line"
    first_line: int
    count: int
    graded: JsonlBlock | None = None

    @property
    def traces(self) -> int:
        """Traces (and undecodable records) in this chunk."""
        return self.count

    def origin(self) -> tuple[str, int, str]:
        """(source, first, unit) for the core's error rows, whose field it writes as
        `file:line N` / `file:row N`, or `file:trace N` after a JSONL resume mid-file."""
        if self.first_line > 0:
            return self.source, self.first_line, self.unit
        return self.source, self.end.traces - self.traces + 1, "trace"


@dataclass(kw_only=True)
class LinesChunk(RawChunk):
    """The whole JSON lines block[start:stop] (native JSONL mapped from the file, or Parquet rows
    as JSON lines: arrowjson) for Grader.grade_jsonl_block."""

    block: bytes | mmap.mmap
    start: int = 0
    stop: int


@dataclass(kw_only=True)
class ArrowChunk(RawChunk):
    """A Parquet record batch in the native schema with its Arrow buffers (arrowcols), for
    Grader.grade_arrow_block."""

    unit: str = "row"
    batch: Any  # a pyarrow RecordBatch, or the core's ArrowBatch
    columns: dict[str, arrowcols.Buffers] | _core.ArrowBatch


Chunk: TypeAlias = ItemsChunk | LinesChunk | ArrowChunk


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
                    # A first line with other keys is left to the importers.
                    native = isinstance(first, dict) and set(first) <= NATIVE_TRACE_KEYS
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


def _jsonl_blocks(
    file: InputFile, offset: int, chunk_size: int
) -> Iterator[tuple[mmap.mmap, int, int, int, int]]:
    """(block, start, stop, traces, lines) per chunk of a native JSONL file: the whole lines
    block[start:stop] holding at most chunk_size traces, and how many lines they are.

    Each block maps READ_BYTES of the file (read-only, pages populated by this thread), which
    the core reads in place: no copy of the input. A line cut by the end of a block is mapped
    again with the next one, and a line longer than a block doubles the size. A block is
    unmapped when its last chunk is dropped, so memory stays a few blocks.
    """
    size = READ_BYTES
    with open(file.path, "rb", buffering=0) as handle:
        total = os.fstat(handle.fileno()).st_size
        while offset < total:
            base = offset - offset % mmap.ALLOCATIONGRANULARITY
            length = min(size + offset - base, total - base)
            eof = base + length == total
            block = mmap.mmap(
                handle.fileno(), length, offset=base, prot=mmap.PROT_READ,
                flags=mmap.MAP_SHARED | POPULATE,
            )  # fmt: skip
            first = start = offset - base
            while True:
                consumed, traces, lines = _core.split_jsonl(block, start, chunk_size, eof)
                if not consumed:
                    break
                yield block, start, start + consumed, traces, lines
                start += consumed
            if eof:
                return
            if start == first:
                size *= 2  # no whole line in this block
            offset = base + start


def _jsonl_block_chunks(
    file: InputFile, index: int, offset: int, chunk_size: int, traces: int
) -> Iterator[LinesChunk]:
    """The block chunks of native JSONL file `index`, from `offset` on."""
    name = Path(file.path).name
    line = 0 if offset == 0 else -1  # line numbers are exact only from the start
    for block, first, stop, count, lines in _jsonl_blocks(file, offset, chunk_size):
        traces += count
        offset += stop - first
        yield LinesChunk(
            end=Position(index, offset, traces), bytes_read=stop - first, source=name,
            count=count, first_line=max(line + 1, 0), block=block, start=first, stop=stop,
        )  # fmt: skip
        if line >= 0:
            line += lines


def jsonl_chunk_spans(
    file: InputFile, offset: int, chunk_size: int
) -> Iterator[tuple[int, int, int, int]]:
    """(start, stop, traces, first line) of each chunk of a native JSONL file from `offset`,
    as the local engine cuts them (read_chunks with raw_input), in file bytes; first line is 0
    when unknown (after a resume mid-file)."""
    for chunk in _jsonl_block_chunks(file, 0, offset, chunk_size, 0):
        yield chunk.end.offset - chunk.bytes_read, chunk.end.offset, chunk.count, chunk.first_line


def _jsonl(
    file: InputFile, index: int, offset: int, chunk_size: int, traces: int
) -> Iterator[tuple[list[bytes | ReadFailure], int, int]]:
    """(items, end offset, bytes read) per chunk of a native JSONL file, for a server: the
    lines decoded and serialized by the core, an unreadable one with the field and message of
    the local engine's error row for it (`file:line N`, the core decoder's text)."""
    for chunk in _jsonl_block_chunks(file, index, offset, chunk_size, traces):
        items = jsonl_items(chunk.block, chunk.start, chunk.stop, chunk.origin())
        yield items, chunk.end.offset, chunk.bytes_read


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
    (one long-lived reader's decode buffers keep growing). Arrow's pool keeps the buffers
    freed by one batch for the next: handing them back to the OS after every batch
    (release_unused) made every batch fault in and zero its ~8 MB of strings again: a third
    of a parquet → parquet run's CPU at 100k traces (with the output's, 4.99 s → 3.33 s),
    for 234 rather than 310 MiB of peak RSS, which stays flat from 100k to 1M traces either
    way. Batches do not span row groups.
    Decoded on this thread (use_threads=False): the grading pool already has every core, and
    Arrow's own threads on top cost more than they give (parquet → jsonl 1.4x faster at 100k
    traces, 3 interleaved rounds).
    """
    import pyarrow.parquet as pq  # noqa: PLC0415  (optional dependency)

    for group in groups:
        reader = pq.ParquetFile(path)
        yield from reader.iter_batches(
            batch_size=chunk_size, row_groups=[group], columns=columns, use_threads=False
        )
        reader.close()


def row_groups(meta: Any, offset: int, stop: int | None) -> tuple[list[int], int]:
    """The row groups of pyarrow FileMetaData `meta` holding rows `offset` to `stop - 1`
    (None: to the end) and the first row of the first one; see group_span."""
    rows = [meta.row_group(group).num_rows for group in range(meta.num_row_groups)]
    return group_span(rows, offset, stop)


def group_span(rows: Sequence[int], offset: int, stop: int | None) -> tuple[list[int], int]:
    """The row groups (of `rows[g]` rows each) holding rows `offset` to `stop - 1` (None: to
    the end) and the first row of the first one (the rows before `offset` in it are dropped
    by the reader)."""
    groups: list[int] = []
    row, start = 0, 0
    for group, count in enumerate(rows):
        if row + count > offset and (stop is None or row < stop):
            if not groups:
                start = row
            groups.append(group)
        row += count
    return groups, start


def _native_reader(path: str) -> _core.ParquetTraces | None:
    """The core's reader of `path`, or None when it does not read the file exactly as the
    pyarrow path does (another schema or type, a codec it lacks, a damaged footer: pyarrow
    then reads it, or reports it in its own words), or when TRAJGRADE_PARQUET_READER=pyarrow
    asks for pyarrow's reader (to compare, or to step around a reader defect)."""
    if os.environ.get(PARQUET_READER_ENV, "auto") == "pyarrow":
        return None
    try:
        return _core.ParquetTraces(path)
    except (ValueError, OSError):
        return None


def _parquet(
    file: InputFile,
    index: int,
    start: Position,
    chunk_size: int,
    *,
    raw_input: bool,
    stop: int | None,
) -> Iterator[Chunk]:
    """The chunks of Parquet file `index` (one row per trace) from row `start.offset` to the end
    of the row group holding row `stop - 1` (None: the file's end), read by pyarrow (a file in
    the native schema is read by the core: _native_parquet). With raw_input, batches in a
    layout the core reads are raw chunks: from their Arrow buffers (arrowcols), or their rows
    as a block of JSON lines (arrowjson)."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (optional dependency)

    parquet = pq.ParquetFile(file.path)
    meta = parquet.metadata
    offset, traces, name = start.offset, start.traces, Path(file.path).name
    groups, row = row_groups(meta, offset, stop)
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
        read, first = int(part.num_rows * per_row), row + 1
        row += part.num_rows
        end = Position(index, row, traces + row - start.offset)
        yield _pyarrow_chunk(part, end, read, name, first, raw_input=raw_input, binary=binary)


def _pyarrow_chunk(
    part: Any, end: Position, read: int, name: str, first: int, *, raw_input: bool, binary: bool
) -> Chunk:
    """A pyarrow record batch's chunk (rows `first` on of file `name`): see _parquet."""
    if not raw_input and not binary:  # for a server: the core's bytes of the same traces
        return ItemsChunk(items=batch_traces(part, name, first), end=end, bytes_read=read)
    buffers = arrowcols.columns(part) if not binary else None
    lines = json_lines(part) if not binary and buffers is None else None
    if buffers is not None:
        return ArrowChunk(
            end=end, bytes_read=read, source=name, first_line=first, count=part.num_rows,
            batch=part, columns=buffers,
        )  # fmt: skip
    if lines is not None:
        block = b"\n".join(lines) + b"\n"  # a JSON line holds no raw newline
        return LinesChunk(
            end=end, bytes_read=read, source=name, unit="row", first_line=first,
            count=part.num_rows, block=block, stop=len(block),
        )  # fmt: skip
    if binary:
        items: list[bytes | ReadFailure] = [
            value if value is not None else b"" for value in part.column(0).to_pylist()
        ]
        return ItemsChunk(items=items, end=end, bytes_read=read)
    return ItemsChunk(items=_row_items(part, name, first), end=end, bytes_read=read)


def _native_parquet(
    native: _core.ParquetTraces,
    file: InputFile,
    index: int,
    start: Position,
    chunk_size: int,
    *,
    raw_input: bool,
    stop: int | None,
) -> Iterator[Chunk]:
    """The chunks of a native-schema Parquet file (as _parquet gives them), read by the core:
    each batch decoded with the GIL released (no pyarrow array, no Python object per column),
    graded from its buffers (or, for a server, encoded as Trace bytes). From a batch the core's
    Arrow path does not take (a null struct in a list) on, the rest of the file is read by
    pyarrow: such a file is unusual, and a batch at a time would read its row group again for
    every batch.

    Why: on two cores the reading competes with the grading pool for the CPU, and pyarrow's
    reader took 1.6x the core's CPU for the 1M-trace benchmark file (docs/performance.md)."""
    counts = native.row_groups
    offset, traces, name = start.offset, start.traces, Path(file.path).name
    groups, row = group_span(counts, offset, stop)
    per_row = file.size / max(sum(counts), 1)
    for group in groups:
        skip = max(offset - row, 0)
        row += skip
        batches = native.batches(group, skip, chunk_size)
        while True:
            try:
                batch = next(batches, None)
            except ValueError as exc:  # a page the reader cannot decode
                raise SourceError(f"{file.path}: row group {group}: {exc}") from None
            if batch is None:
                break
            if batch.unsupported is not None:
                rest = Position(index, row, traces + row - start.offset)
                yield from _parquet(file, index, rest, chunk_size, raw_input=raw_input, stop=stop)
                return
            read, first = int(batch.num_rows * per_row), row + 1
            row += batch.num_rows
            end = Position(index, row, traces + row - start.offset)
            if raw_input:
                yield ArrowChunk(
                    end=end, bytes_read=read, source=name, first_line=first,
                    count=batch.num_rows, batch=batch, columns=batch,
                )  # fmt: skip
            else:
                items: list[bytes | ReadFailure] = [*_core.arrow_traces(batch.num_rows, batch)]
                yield ItemsChunk(items=items, end=end, bytes_read=read)


def batch_traces(part: Any, name: str, first: int) -> list[bytes | ReadFailure]:
    """A pyarrow record batch's rows (row `first` on, of file `name`) as `Trace` bytes for a
    server or a Ray pipeline, read as the local engine reads them: by the core from its Arrow
    buffers, or from its rows as JSON lines (an unreadable row as the local engine's
    `file:row N` error row), else row by row (_row_items)."""
    buffers = arrowcols.columns(part)
    if buffers is not None:
        return list(_core.arrow_traces(part.num_rows, buffers))
    lines = json_lines(part)
    if lines is None:
        return _row_items(part, name, first)
    block = b"\n".join(lines) + b"\n"
    return jsonl_items(block, 0, len(block), (name, first, "row"))


def _row_items(part: Any, name: str, first: int) -> list[bytes | ReadFailure]:
    """A batch in a layout neither the core's Arrow reader nor arrowjson takes, row by row
    (row `first` on): each row's Python value as a JSON line, decoded by the core (so its
    error row is the core's, as for any other row); a row holding a value JSON cannot
    (bytes, a timestamp) is an error row naming it."""
    items: list[bytes | ReadFailure] = []
    for number, record in enumerate(part.to_pylist(), start=first):
        try:
            line = json.dumps(_parquet_row(record), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            trace_id = record.get("id") if isinstance(record.get("id"), str) else ""
            items.append(ReadFailure(trace_id, f"{name}:row {number}", f"not trace JSON: {exc}"))
            continue
        items += jsonl_items(line, 0, len(line), (name, number, "row"))
    return items


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


def file_chunks(
    files: Sequence[InputFile],
    index: int,
    chunk_size: int,
    start: Position,
    *,
    raw_input: bool = False,
    stop: int | None = None,
) -> Iterator[Chunk]:
    """The chunks of input `index` from `start` (its offset and the run's traces before it):
    read_chunks for one file. `stop` (Parquet only) ends it with the row group holding row
    `stop - 1`."""
    file, traces, offset = files[index], start.traces, start.offset
    if file.format == "jsonl" and raw_input:
        yield from _jsonl_block_chunks(file, index, offset, chunk_size, traces)
        return
    if file.format == "parquet":
        native = _native_reader(file.path)
        if native is None:
            yield from _parquet(file, index, start, chunk_size, raw_input=raw_input, stop=stop)
        else:
            yield from _native_parquet(
                native, file, index, start, chunk_size, raw_input=raw_input, stop=stop
            )
        return
    if file.format == "jsonl":
        parts = _jsonl(file, index, offset, chunk_size, traces)
    else:
        parts = _imported(file, offset, chunk_size)
    for items, end, read in parts:
        traces += len(items)
        yield ItemsChunk(items=items, end=Position(index, end, traces), bytes_read=read)


def read_chunks(
    files: Sequence[InputFile],
    chunk_size: int,
    start: Position | None = None,
    *,
    raw_input: bool = False,
) -> Iterator[Chunk]:
    """Every input record in order, in chunks of at most chunk_size, starting after `start`.

    With raw_input, native JSONL and Parquet in a layout the core reads come as raw chunks
    (RawChunk) for a backend that grades them in the core (Grader.grade_jsonl_block,
    grade_arrow_block); everything else as items of serialized Traces.
    """
    position = start or Position()
    for index in range(position.file, len(files)):
        offset = position.offset if index == position.file else 0
        for chunk in file_chunks(
            files, index, chunk_size, Position(index, offset, position.traces),
            raw_input=raw_input,
        ):  # fmt: skip
            position = chunk.end
            yield chunk
