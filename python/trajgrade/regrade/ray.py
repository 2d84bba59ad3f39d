"""The Ray engine: the regrade as a Ray Data read of the inputs' byte ranges and row groups
(raysource), graded in the workers, committed by the driver in input order as they arrive."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console

from trajgrade import _core
from trajgrade.regrade import pipeline
from trajgrade.regrade.output import arrow_table_from_jsonl
from trajgrade.regrade.pipeline import RunProgress
from trajgrade.regrade.raysource import (
    TraceFileDatasource,
    add_record,
    backend,
    plan,
    record_schema,
    record_table,
)
from trajgrade.regrade.resume import RunState
from trajgrade.regrade.source import (
    InputFile,
    Position,
    ReadFailure,
    batch_traces,
    jsonl_items,
    resolve_inputs,
)
from trajgrade.regrade.summary import Summary

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

# Ray's own loggers, quiet (warnings and errors only) unless verbose.
_RAY_LOGGERS = ("ray", "ray.data")
_PROGRESS_LOGGER = "ray.data._internal.progress"
_configured: list[bool] = []  # init() has set the logs and the data context up


def init(*, verbose: bool = False) -> float:
    """Connect to the cluster at RAY_ADDRESS, or start a local Ray, unless connected already;
    Ray's INFO logs, worker output and progress bars only when verbose (the first call in a
    process decides). The seconds it took."""
    import ray  # noqa: PLC0415
    import ray.data  # noqa: PLC0415

    began = time.perf_counter()
    if _configured and ray.is_initialized():
        return 0.0
    _configured.append(verbose)
    level = logging.INFO if verbose else logging.WARNING
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        # A local instance takes no dashboard (a cluster's own settings are not ours to pass).
        extra: dict[str, Any] = {} if address else {"include_dashboard": False}
        ray.init(address=address, log_to_driver=verbose, logging_level=level, **extra)
    for name in _RAY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    # Ray Data warns once that its progress bars are off, which is what quiet asked for.
    logging.getLogger(_PROGRESS_LOGGER).setLevel(level if verbose else logging.ERROR)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = verbose
    context.print_on_execution_start = verbose
    context.enable_auto_log_stats = verbose
    context.execution_options.preserve_order = True  # rows are committed in input order
    return time.perf_counter() - began


def read_results(
    files: Sequence[InputFile],
    suite_bytes: bytes,
    *,
    chunk_size: int,
    threads: int = 1,
    start: Position | None = None,
    arrow: bool = False,
) -> ray.data.Dataset:
    """The graded chunks of the inputs from `start`, one row each (raysource._record): the
    workers read their byte range or row group and grade it with the core's block path (with
    `arrow`, each chunk's rows also as an Arrow table built from the core's columns)."""
    import ray.data  # noqa: PLC0415

    spans = plan(files, chunk_size, start or Position())
    if not spans:  # nothing left to read (Ray wants at least one read task)
        empty: ray.data.Dataset = ray.data.from_arrow(record_schema().empty_table())
        return empty
    source = TraceFileDatasource(
        files, spans, suite_bytes, chunk_size=chunk_size, threads=threads, arrow=arrow
    )
    dataset: ray.data.Dataset = ray.data.read_datasource(
        source, num_cpus=threads, override_num_blocks=len(spans)
    )
    return dataset


def run(
    files: Sequence[InputFile],
    suite_bytes: bytes,
    state: RunState,
    *,
    chunk_size: int,
    threads: int,
    console: Console,
    show_progress: bool,
    on_commit: Callable[[int], None] | None = None,
) -> Summary:
    """Grade and commit every chunk after the state's position on Ray (the pipeline of the
    local engine, with the workers' chunks in place of the grading thread's)."""
    summary = state.summary or Summary(suite_id=backend(suite_bytes, threads).suite_id)
    results = read_results(
        files, suite_bytes, chunk_size=chunk_size, threads=threads, start=state.position,
        arrow=state.fmt == "parquet",
    )  # fmt: skip
    with RunProgress(console, show_progress, files, state.position, summary) as progress:
        end: Position | None = None  # the last chunk appended but not committed
        committed_at = time.monotonic()
        for batch in _batches(results):
            for record in batch.to_pylist():
                add_record(summary, record)
                end = Position(record["file"], record["offset"], record["traces"])
                state.append(
                    record["rows"], longest_row=record["longest_row"], table=record_table(record)
                )
                progress.advance(record["bytes_read"])
                # As the local pipeline: a commit (its fsyncs) at most every COMMIT_SECONDS,
                # at a task's end, so the driver's fsyncs do not hold up the workers' blocks.
                if time.monotonic() - committed_at >= pipeline.COMMIT_SECONDS:
                    pipeline.commit(state, end, summary, on_commit)
                    end, committed_at = None, time.monotonic()
        if end is not None:
            pipeline.commit(state, end, summary, on_commit)
        progress.done()
    return summary


def _batches(ds: ray.data.Dataset) -> Iterator[pa.Table]:
    """The dataset's blocks as Arrow tables, in order (preserve_order is set)."""
    batches: Any = ds.iter_batches(batch_format="pyarrow", batch_size=None)
    return cast(Iterator["pa.Table"], batches)


def _rows_table(batch: pa.Table) -> pa.Table:
    """Graded chunks (read_results) → their result rows, the stable schema plus `jsonl`."""
    return _with_jsonl(b"".join(batch.column("rows").to_pylist()))


def grade_files(
    paths: Sequence[str],
    suite_bytes: bytes,
    *,
    format: str = "auto",
    batch_size: int = 2048,
    threads: int = 1,
) -> ray.data.Dataset:
    """Result rows for native JSONL or Parquet files, plus a `jsonl` column (each row's JSONL
    bytes, as the local engine writes it), in input order: read_results, row by row."""
    results = read_results(
        resolve_inputs(paths, format), suite_bytes, chunk_size=batch_size, threads=threads
    )
    return results.map_batches(_rows_table, batch_format="pyarrow", batch_size=None)


def _with_jsonl(rows: bytes) -> pa.Table:
    """Result rows (JSONL bytes) as the grade_files table: the rows' columns plus `jsonl`."""
    import pyarrow as pa  # noqa: PLC0415

    lines = rows.splitlines(keepends=True)
    table = arrow_table_from_jsonl(rows, max(map(len, lines), default=0))
    return table.append_column("jsonl", pa.array(lines, pa.binary()))


def _decode_text(batch: pa.Table) -> pa.Table:
    """JSONL lines → a `trace` column (bytes) or the line's failure, decoded by the core as
    the local engine decodes them (blank lines are no traces, as there); a failure's field is
    the file's name (a line's number in its file is not known here)."""
    import pyarrow as pa  # noqa: PLC0415

    traces: list[bytes | None] = []
    failures: list[dict[str, str] | None] = []
    paths = batch.column("path").to_pylist() if "path" in batch.column_names else None
    # The lines of each run of one file as one block: one core call, not one a line.
    runs: list[tuple[str, list[bytes]]] = []
    for i, text in enumerate(batch.column("text").to_pylist()):
        line = text.encode() if isinstance(text, str) else bytes(text)
        if not line.strip():
            continue
        name = Path(paths[i]).name if paths else "input"
        if not runs or runs[-1][0] != name:
            runs.append((name, []))
        runs[-1][1].append(line)
    for name, lines in runs:
        block = b"\n".join(lines) + b"\n"
        items = jsonl_items(block, 0, len(block), (name, 1, "trace"))
        if len(items) != len(lines):  # a line the core reads otherwise: each on its own
            items = [_one(jsonl_items(line, 0, len(line), (name, 1, "trace"))) for line in lines]
        for item in items:
            _add(traces, failures, item, name)
    return _decoded(pa, traces, failures)


def _one(items: list[bytes | ReadFailure]) -> bytes | ReadFailure:
    (item,) = items  # one non-blank line is one trace or one failure
    return item


def _decode_rows(batch: pa.Table) -> pa.Table:
    """Parquet trace rows (native columns, or a binary `trace` column) → `trace` column, read
    by the core as the local engine reads them (source.batch_traces); a failure's field is
    `input` (a row's file and number are not known here)."""
    import pyarrow as pa  # noqa: PLC0415

    if "trace" in batch.column_names:
        traces = batch.column("trace").to_pylist()
        return _decoded(pa, traces, [None] * len(traces))
    decoded: list[bytes | None] = []
    failures: list[dict[str, str] | None] = []
    for part in batch.to_batches():
        for item in batch_traces(part, "input", 1):
            _add(decoded, failures, item, "input")
    return _decoded(pa, decoded, failures)


def _add(
    traces: list[bytes | None],
    failures: list[dict[str, str] | None],
    item: bytes | ReadFailure,
    field: str,
) -> None:
    """One decoded record: its Trace bytes, or its failure (trace id, the given field, the
    core's message)."""
    if isinstance(item, bytes):
        traces.append(item)
        failures.append(None)
    else:
        traces.append(None)
        failures.append({"trace_id": item.trace_id, "field": field, "message": item.message})


def _decoded(
    pa: Any, traces: list[bytes | None], failures: list[dict[str, str] | None]
) -> pa.Table:
    failure_type = pa.struct(
        [("trace_id", pa.string()), ("field", pa.string()), ("message", pa.string())]
    )
    return pa.table(
        {"trace": pa.array(traces, pa.binary()), "failure": pa.array(failures, failure_type)}
    )


def _grade(batch: pa.Table, suite_bytes: bytes, threads: int) -> pa.Table:
    """`trace`/`failure` columns → result rows with the stable schema (outputs.arrow_schema),
    written by the core (_core.outcome_block)."""
    suite = backend(suite_bytes, threads).suite
    traces = batch.column("trace").to_pylist()
    failures = batch.column("failure").to_pylist()
    outcomes = iter(suite.grade_batch([t for t in traces if t is not None]))
    items: list[bytes | tuple[str, str, str]] = [
        next(outcomes)
        if trace is not None
        else (failure["trace_id"], failure["field"], failure["message"])
        for trace, failure in zip(traces, failures, strict=True)
    ]
    block = _core.outcome_block(suite.suite_id, items, 0)
    return arrow_table_from_jsonl(block.rows, block.longest_row)


def read_traces(paths: Sequence[str], format: str = "auto") -> ray.data.Dataset:
    """A dataset of serialized traces (`trace`, `failure` columns) from JSONL or Parquet files."""
    import ray.data  # noqa: PLC0415

    files = resolve_inputs(paths, format)
    kinds = {f.format for f in files}
    if kinds == {"jsonl"}:
        ds = ray.data.read_text([f.path for f in files], include_paths=True)
        return ds.map_batches(_decode_text, batch_format="pyarrow")
    if kinds == {"parquet"}:
        ds = ray.data.read_parquet([f.path for f in files])
        return ds.map_batches(_decode_rows, batch_format="pyarrow")
    raise ValueError(
        "the Ray engine reads native JSONL or Parquet (one format per run); "
        "convert other formats with the local engine first"
    )


def grade_dataset(
    traces: ray.data.Dataset, suite_bytes: bytes, *, batch_size: int = 2048, threads: int = 1
) -> ray.data.Dataset:
    """Result rows for a dataset of traces: the core grades each batch inside the workers."""
    udf: Any = _grade  # Ray's stubs do not model fn_kwargs-taking UDFs
    return traces.map_batches(
        udf,
        batch_format="pyarrow",
        batch_size=batch_size,
        fn_kwargs={"suite_bytes": suite_bytes, "threads": threads},
    )


def regrade(
    inputs: Sequence[str],
    suite_bytes: bytes,
    out: str,
    *,
    format: str = "auto",
    batch_size: int = 2048,
    threads: int = 1,
    resume: bool = False,
    verbose: bool = False,
    console: Console | None = None,
    show_progress: bool = False,
    on_commit: Callable[[int], None] | None = None,
) -> Summary:
    """The Ray counterpart of trajgrade.regrade.regrade: the same rows, in input order.

    `out` ending in .jsonl/.parquet is committed chunk by chunk as the workers finish them,
    exactly as the local engine does (resumable, by either engine, and put in place
    atomically at the end); any other `out` is a directory that Ray's writers fill with
    Parquet files in parallel (not resumable).
    """
    from trajgrade import regrade as api  # noqa: PLC0415

    init(verbose=verbose)
    if Path(out).suffix.lower() in {".jsonl", ".ndjson", ".parquet", ".pq"}:
        return api.regrade(
            inputs, suite_bytes, out, format=format, chunk_size=batch_size, resume=resume,
            threads=threads, engine="ray", console=console, show_progress=show_progress,
            on_commit=on_commit,
        )  # fmt: skip
    # Held (Ray spills to disk) so the core's counts are merged here and the rows written by
    # Ray's writers, with no second pass over the rows.
    records = read_results(
        resolve_inputs(inputs, format), suite_bytes, chunk_size=batch_size, threads=threads
    ).materialize()
    summary = Summary(suite_id=backend(suite_bytes, threads).suite_id)
    for batch in _batches(records):
        for record in batch.to_pylist():
            add_record(summary, record)
    records.map_batches(_rows_table, batch_format="pyarrow", batch_size=None).drop_columns(
        ["jsonl"]
    ).write_parquet(out)
    return summary
