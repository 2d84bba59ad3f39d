"""The Ray engine: the same regrade as a Ray Data pipeline (read → map_batches grading → write)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trajgrade import _core
from trajgrade.regrade.output import (
    arrow_schema,
    arrow_table,
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

# One grader and compiled suite per worker process, built on first use (never pickled: a rayon
# pool does not survive being shipped to another process).
_SUITES: dict[tuple[bytes, int], _core.CompiledSuite] = {}


def _compiled(suite_bytes: bytes, threads: int) -> _core.CompiledSuite:
    key = (suite_bytes, threads)
    suite = _SUITES.get(key)
    if suite is None:
        suite = _SUITES[key] = _core.Grader(threads=threads).compile_suite(suite_bytes)
    return suite


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
    results = grade_dataset(
        read_traces(inputs, format), suite_bytes, batch_size=batch_size, threads=threads
    )
    suite_id = _compiled(suite_bytes, threads).suite_id
    summary = Summary(suite_id=suite_id)
    try:
        fmt = output_format(out)
    except ValueError:
        results.write_parquet(out)
        for batch in _batches(ray.data.read_parquet(out)):
            summary.add(batch.to_pylist())
        return summary
    target = Path(out).absolute()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if fmt == "jsonl":
            with tmp.open("wb") as handle:
                for batch in _batches(results):
                    rows = batch.to_pylist()
                    summary.add(rows)
                    handle.write(b"".join(jsonl_line(row) for row in rows))
                handle.flush()
                os.fsync(handle.fileno())
        else:
            with pq.ParquetWriter(tmp, arrow_schema()) as writer:
                for batch in _batches(results):
                    summary.add(batch.to_pylist())
                    writer.write_table(batch.cast(arrow_schema()))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return summary
