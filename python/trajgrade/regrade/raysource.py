"""The Ray engine's datasource: byte ranges (JSONL) and row groups (Parquet) of the inputs,
read and graded in the workers by the local engine's block path, one output row per chunk."""

from __future__ import annotations

import functools
import json
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import arrow_table_from_columns, row_from_json
from trajgrade.regrade.source import (
    POPULATE,
    Chunk,
    InputFile,
    LinesChunk,
    Position,
    file_chunks,
    jsonl_chunk_spans,
    row_groups,
)
from trajgrade.regrade.summary import Summary

if TYPE_CHECKING:
    import pyarrow as pa

    from trajgrade._core import JsonlBlock

# Chunks per read task (JSONL chunks; for Parquet whole row groups of about as many rows).
# Ray Data notices a finished read task and starts the next one some 0.2 s later (its
# scheduling loop waits up to 0.1 s for the running tasks, then the lease): with four chunks
# a task (~0.33 s of grading) each worker sat idle 40% of a 1M-trace JSONL run, which took
# 20-23 s; sixteen took 15-16 s (1M traces, 2 workers of 1 CPU, idle machine, 2026-12-06).
# Each task still streams one block per chunk, so the first rows are committed after the
# first chunk, and a task's share of the work stays small enough to balance two workers.
TASK_CHUNKS = 16


@dataclass(frozen=True)
class Span:
    """One read task's share of an input: the chunks of file `index` from `start` (the
    position before them, the run's traces included), `stop` the end (exclusive) in bytes
    (JSONL) or rows (Parquet), and for JSONL the chunks' own (start, stop, traces, first line)
    as the local engine cuts them, so both engines commit at the same positions."""

    index: int
    start: Position
    stop: int
    jsonl: tuple[tuple[int, int, int, int], ...] = ()


def plan(files: Sequence[InputFile], chunk_size: int, position: Position) -> list[Span]:
    """The spans of every input from `position` on (a resumed run's), in input order.

    JSONL files are cut into the local engine's chunks by one pass of the core's line
    splitter over the file (no decoding), TASK_CHUNKS chunks a span; Parquet files into runs
    of whole row groups of about TASK_CHUNKS chunks' rows (from the metadata). Raises
    ValueError for other formats (the importers read a file whole: convert them with the
    local engine first).
    """
    import pyarrow.parquet as pq  # noqa: PLC0415  (optional dependency)

    spans: list[Span] = []
    traces = position.traces
    for index in range(position.file, len(files)):
        file = files[index]
        offset = position.offset if index == position.file else 0
        if file.format == "jsonl":
            chunks = list(jsonl_chunk_spans(file, offset, chunk_size))
            for first in range(0, len(chunks), TASK_CHUNKS):
                task = tuple(chunks[first : first + TASK_CHUNKS])
                spans.append(Span(index, Position(index, task[0][0], traces), task[-1][1], task))
                traces += sum(chunk[2] for chunk in task)
        elif file.format == "parquet":
            meta = pq.ParquetFile(file.path).metadata
            groups, end = row_groups(meta, offset, None)
            first = max(end, offset)
            for group in groups:  # whole row groups, about TASK_CHUNKS chunks' rows a span
                end += meta.row_group(group).num_rows
                if end - first >= TASK_CHUNKS * chunk_size or group == groups[-1]:
                    spans.append(Span(index, Position(index, first, traces), end))
                    traces, first = traces + end - first, end
        else:
            raise ValueError(
                f"{file.path}: the Ray engine reads native JSONL and Parquet; convert "
                f"{file.format!r} input with the local engine first"
            )
    return spans


# One grader and compiled suite per worker process, built on first use (never pickled: a
# rayon pool does not survive being shipped to another process).
_BACKENDS: dict[tuple[bytes, int], LocalBackend] = {}


def backend(suite_bytes: bytes, threads: int) -> LocalBackend:
    """This process's LocalBackend for the suite."""
    key = (suite_bytes, threads)
    found = _BACKENDS.get(key)
    if found is None:
        found = _BACKENDS[key] = LocalBackend(suite_bytes, threads=threads)
    return found


def _span_chunks(files: Sequence[InputFile], span: Span, chunk_size: int) -> Iterator[Chunk]:
    """The span's chunks, read from the file: JSONL as the planned blocks (one read of the
    span's bytes), Parquet as the local engine reads that row group."""
    if not span.jsonl:
        yield from file_chunks(
            files, span.index, chunk_size, span.start, raw_input=True, stop=span.stop
        )
        return
    # Mapped, as the local engine reads JSONL: the core reads the page cache in place (a pread
    # copied the span's ~220 MB first).
    base = span.start.offset - span.start.offset % mmap.ALLOCATIONGRANULARITY
    with open(files[span.index].path, "rb", buffering=0) as handle:
        data = mmap.mmap(
            handle.fileno(), span.stop - base, offset=base, prot=mmap.PROT_READ,
            flags=mmap.MAP_SHARED | POPULATE,
        )  # fmt: skip
    name, traces = Path(files[span.index].path).name, span.start.traces
    for start, stop, count, first_line in span.jsonl:
        traces += count
        yield LinesChunk(
            end=Position(span.index, stop, traces), bytes_read=stop - start, source=name,
            count=count, first_line=first_line, block=data, start=start - base, stop=stop - base,
        )  # fmt: skip


def _sample_spans(graded: JsonlBlock) -> list[int]:
    """Where the rows the summary may sample (error and failing rows, in order) are in the
    graded rows, as flat (start, end) pairs: the core's marks."""
    return [at for mark in graded.marks for at in (mark.row_start, mark.row_end)]


def _ipc(graded: JsonlBlock) -> bytes | None:
    """The rows' Arrow table (the core's columns) as an Arrow IPC stream, if the core wrote
    them (Parquet output)."""
    if graded.columns is None:
        return None
    import pyarrow as pa  # noqa: PLC0415

    table = arrow_table_from_columns(graded.items, graded.columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def record_table(record: dict[str, Any]) -> pa.Table | None:
    """A record's rows as the Arrow table the worker built from the core's columns, or None
    (JSONL output)."""
    if record["table"] is None:
        return None
    import pyarrow as pa  # noqa: PLC0415

    return pa.ipc.open_stream(record["table"]).read_all()


def _record(chunk: Chunk, suite_id: str) -> dict[str, Any]:
    """A graded chunk as one output row: its rows (JSONL bytes, and for Parquet output their
    Arrow table as IPC bytes), the position after it, its counts (a Summary without sample)
    and where its sample candidates are."""
    graded = chunk.graded
    assert graded is not None
    counts = Summary(suite_id=suite_id, failure_sample=0)
    counts.add_block(graded)
    return {
        "rows": graded.rows,
        "table": _ipc(graded),
        "longest_row": graded.longest_row,
        "file": chunk.end.file,
        "offset": chunk.end.offset,
        "traces": chunk.end.traces,
        "bytes_read": chunk.bytes_read,
        "counts": json.dumps(counts.to_json()),
        "sample": _sample_spans(graded),
    }


def record_schema() -> pa.Schema:
    """The datasource's rows: one per graded chunk (see _record)."""
    import pyarrow as pa  # noqa: PLC0415

    return pa.schema(
        [
            ("rows", pa.large_binary()),
            ("table", pa.large_binary()),
            ("longest_row", pa.int64()),
            ("file", pa.int64()),
            ("offset", pa.int64()),
            ("traces", pa.int64()),
            ("bytes_read", pa.int64()),
            ("counts", pa.string()),
            ("sample", pa.list_(pa.int64())),
        ]
    )


def _read_span(
    files: Sequence[InputFile],
    span: Span,
    suite_bytes: bytes,
    chunk_size: int,
    *,
    threads: int,
    arrow: bool,
) -> Iterator[pa.Table]:
    """A read task: the span's chunks graded in this worker, one block per chunk (with the
    rows' Arrow table if `arrow`)."""
    import pyarrow as pa  # noqa: PLC0415

    graded = backend(suite_bytes, threads)
    graded.arrow = arrow
    for chunk in graded.grade(_span_chunks(files, span, chunk_size)):
        yield pa.Table.from_pylist([_record(chunk, graded.suite_id)], schema=record_schema())


class TraceFileDatasource(Datasource):
    """The inputs of a regrade as Ray read tasks, one per span (plan()); each yields one row
    per chunk, in input order within the span."""

    def __init__(
        self,
        files: Sequence[InputFile],
        spans: Sequence[Span],
        suite_bytes: bytes,
        *,
        chunk_size: int,
        threads: int,
        arrow: bool = False,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Ray's is untyped
        self._arrow = arrow
        self._files = list(files)
        self._spans = list(spans)
        self._suite_bytes = suite_bytes
        self._chunk_size = chunk_size
        self._threads = threads

    def get_name(self) -> str:
        """Shown in Ray's logs and stats."""
        return "TrajgradeTraces"

    def estimate_inmemory_data_size(self) -> int:
        """The input bytes (the rows are of the same order)."""
        return sum(f.size for f in self._files[self._spans[0].index :]) if self._spans else 0

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """One task per span, whatever `parallelism` asks: spans are the commit units."""
        del parallelism, per_task_row_limit, data_context
        tasks = []
        for span in self._spans:
            read: Any = functools.partial(
                _read_span, self._files, span, self._suite_bytes, self._chunk_size,
                threads=self._threads, arrow=self._arrow,
            )  # fmt: skip
            metadata = BlockMetadata(
                num_rows=None,
                size_bytes=None,
                exec_stats=None,
                input_files=(self._files[span.index].path,),
            )
            tasks.append(ReadTask(read, metadata, schema=record_schema()))
        return tasks


def add_record(summary: Summary, record: dict[str, Any]) -> None:
    """Count one chunk row (_record) into the run's summary, sampling its candidates in order
    while the sample has room: the summary local grading of those rows gives."""
    summary.merge(Summary.from_json(json.loads(record["counts"])))
    spans, rows = record["sample"], record["rows"]
    for i in range(0, len(spans), 2):
        if summary.sample_full:
            return
        summary.sample(row_from_json(json.loads(rows[spans[i] : spans[i + 1]])))
