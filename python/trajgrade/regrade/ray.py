"""The Ray engine: the same regrade as a Ray Data pipeline (read → map_batches grading → write)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trajgrade import _core
from trajgrade.regrade import arrowcols
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import (
    arrow_schema,
    arrow_table,
    arrow_table_from_jsonl,
    failure_row,
    jsonl_line,
    outcome_row,
    output_format,
)
from trajgrade.regrade.source import ReadFailure, resolve_inputs
from trajgrade.regrade.summary import Summary
from trajgrade.regrade.tracejson import (
    TraceJsonError,
    peek_trace_id,
    trace_bytes,
    trace_bytes_from_dict,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

# One grader and compiled suite per worker process (the local engine's backend), built on first
# use (never pickled: a rayon pool does not survive being shipped to another process).
_BACKENDS: dict[tuple[bytes, int], LocalBackend] = {}


def _backend(suite_bytes: bytes, threads: int) -> LocalBackend:
    key = (suite_bytes, threads)
    backend = _BACKENDS.get(key)
    if backend is None:
        backend = _BACKENDS[key] = LocalBackend(suite_bytes, threads=threads)
        backend.max_failing = 0  # the driver's summary counts the rows
    return backend


def _compiled(suite_bytes: bytes, threads: int) -> _core.CompiledSuite:
    return _backend(suite_bytes, threads).suite


def _with_jsonl(rows: bytes) -> pa.Table:
    """Result rows (JSONL bytes) as the grade_files table: the rows' columns plus `jsonl`."""
    import pyarrow as pa  # noqa: PLC0415

    lines = rows.splitlines(keepends=True)
    table = arrow_table_from_jsonl(rows, max(map(len, lines), default=0))
    return table.append_column("jsonl", pa.array(lines, pa.binary()))


def _grade_text(batch: pa.Table, suite_bytes: bytes, threads: int) -> pa.Table:
    """JSONL lines (read_text) → result rows: the lines as one block through the core
    (grade_jsonl_block), as the local engine grades them; error rows name the file."""
    texts = batch.column("text").to_pylist()
    paths = batch.column("path").to_pylist() if "path" in batch.column_names else None
    block = ("\n".join(texts) + "\n").encode() if texts else b""
    _, rows, _ = _backend(suite_bytes, threads).grade_jsonl(
        block, 0, len(block), lambda mark: Path(paths[mark.line]).name if paths else "input"
    )
    return _with_jsonl(rows)


def _grade_rows(batch: pa.Table, suite_bytes: bytes, threads: int) -> pa.Table:
    """Parquet trace rows → result rows: from their Arrow buffers in the core when the layout
    allows (arrowcols), else as JSON lines (arrowjson), else decoded row by row."""
    backend = _backend(suite_bytes, threads)
    record = batch.combine_chunks().to_batches()
    columns = arrowcols.columns(record[0]) if len(record) == 1 else None
    if columns is not None:
        _, rows, _ = backend.grade_arrow(record[0], columns, lambda mark: "input")
        return _with_jsonl(rows)
    lines = json_lines(record[0]) if len(record) == 1 else None
    if lines is not None:
        block = b"\n".join(lines) + b"\n"
        _, rows, _ = backend.grade_jsonl(block, 0, len(block), lambda mark: "input")
        return _with_jsonl(rows)
    rows = b"".join(map(jsonl_line, _grade(_decode_rows(batch), suite_bytes, threads).to_pylist()))
    return _with_jsonl(rows)


def _decode_text(batch: pa.Table) -> pa.Table:
    """JSONL lines → a `trace` column (bytes) or the line's failure."""
    import pyarrow as pa  # noqa: PLC0415

    traces: list[bytes | None] = []
    failures: list[dict[str, str] | None] = []
    paths = batch.column("path").to_pylist() if "path" in batch.column_names else None
    for i, line in enumerate(batch.column("text").to_pylist()):
        try:
            traces.append(trace_bytes(line))
            failures.append(None)
        except TraceJsonError as exc:
            name = Path(paths[i]).name if paths else "input"
            traces.append(None)
            failures.append({"trace_id": peek_trace_id(line), "field": name, "message": str(exc)})
    return _decoded(pa, traces, failures)


def _decode_rows(batch: pa.Table) -> pa.Table:
    """Parquet trace rows (native columns, or a binary `trace` column) → `trace` column."""
    import pyarrow as pa  # noqa: PLC0415

    if "trace" in batch.column_names:
        traces = batch.column("trace").to_pylist()
        return _decoded(pa, traces, [None] * len(traces))
    decoded: list[bytes | None] = []
    failures: list[dict[str, str] | None] = []
    for raw in batch.to_pylist():
        if isinstance(raw.get("metadata"), list):
            raw["metadata"] = dict(raw["metadata"])
        try:
            decoded.append(trace_bytes_from_dict(raw))
            failures.append(None)
        except TraceJsonError as exc:
            trace_id = raw.get("id") if isinstance(raw.get("id"), str) else ""
            decoded.append(None)
            failures.append({"trace_id": trace_id, "field": "input", "message": str(exc)})
    return _decoded(pa, decoded, failures)


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
    """`trace`/`failure` columns → result rows with the stable schema (outputs.arrow_schema)."""
    suite = _compiled(suite_bytes, threads)
    traces = batch.column("trace").to_pylist()
    failures = batch.column("failure").to_pylist()
    outcomes = iter(suite.grade_batch([t for t in traces if t is not None]))
    rows = [
        outcome_row(next(outcomes), suite.suite_id)
        if trace is not None
        else failure_row(ReadFailure(**failure), suite.suite_id)
        for trace, failure in zip(traces, failures, strict=True)
    ]
    return arrow_table(rows)


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


def grade_files(
    paths: Sequence[str],
    suite_bytes: bytes,
    *,
    format: str = "auto",
    batch_size: int = 2048,
    threads: int = 1,
) -> ray.data.Dataset:
    """Result rows for native JSONL or Parquet files, plus a `jsonl` column (each row's JSONL
    bytes, as the local engine writes it): each batch is read and graded in one step by the
    core in the workers (the local engine's block path), no decoding in Python."""
    import ray.data  # noqa: PLC0415

    files = resolve_inputs(paths, format)
    kinds = {f.format for f in files}
    fn_kwargs = {"suite_bytes": suite_bytes, "threads": threads}
    udf: Any  # Ray's stubs do not model fn_kwargs-taking UDFs
    if kinds == {"jsonl"}:
        ds = ray.data.read_text([f.path for f in files], include_paths=True)
        udf = _grade_text
    elif kinds == {"parquet"}:
        ds = ray.data.read_parquet([f.path for f in files])
        udf = _grade_rows
    else:
        raise ValueError(
            "the Ray engine reads native JSONL or Parquet (one format per run); "
            "convert other formats with the local engine first"
        )
    return ds.map_batches(udf, batch_format="pyarrow", batch_size=batch_size, fn_kwargs=fn_kwargs)


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


def _batches(ds: ray.data.Dataset) -> Iterator[pa.Table]:
    """The dataset's blocks as Arrow tables, in order (preserve_order is set)."""
    batches: Any = ds.iter_batches(batch_format="pyarrow", batch_size=None)
    return cast(Iterator["pa.Table"], batches)


def _init() -> None:
    import ray  # noqa: PLC0415

    if not ray.is_initialized():
        # RAY_ADDRESS (when set) points at a cluster; otherwise a local instance starts.
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)


def regrade(
    inputs: Sequence[str],
    suite_bytes: bytes,
    out: str,
    *,
    format: str = "auto",
    batch_size: int = 2048,
    threads: int = 1,
) -> Summary:
    """The Ray counterpart of trajgrade.regrade.regrade: the same rows, in input order.

    `out` ending in .jsonl/.parquet is written by the driver as one file, atomically and in
    input order (the bytes equal the local engine's for JSONL); any other `out` is a directory
    that Ray's writers fill with Parquet files in parallel.
    """
    import pyarrow.parquet as pq  # noqa: PLC0415
    import ray.data  # noqa: PLC0415

    _init()
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    results = grade_files(
        inputs, suite_bytes, format=format, batch_size=batch_size, threads=threads
    )
    suite_id = _compiled(suite_bytes, threads).suite_id
    summary = Summary(suite_id=suite_id)
    try:
        fmt = output_format(out)
    except ValueError:
        results.drop_columns(["jsonl"]).write_parquet(out)
        for batch in _batches(ray.data.read_parquet(out)):
            summary.add_table(batch)
        return summary
    target = Path(out).absolute()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if fmt == "jsonl":
            with tmp.open("wb") as handle:
                for batch in _batches(results):
                    summary.add_table(batch)
                    handle.write(b"".join(batch.column("jsonl").to_pylist()))
                handle.flush()
                os.fsync(handle.fileno())
        else:
            with pq.ParquetWriter(tmp, arrow_schema()) as writer:
                for batch in _batches(results):
                    rows = batch.drop_columns(["jsonl"])
                    summary.add_table(rows)
                    writer.write_table(rows.cast(arrow_schema()))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return summary
