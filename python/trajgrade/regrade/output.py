"""Result rows: TraceOutcome bytes → row dicts, their JSONL/Parquet encodings, reading back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from trajgrade.regrade.source import ReadFailure
from trajgrade.v1 import assertion_pb2, result_pb2

if TYPE_CHECKING:
    import pyarrow as pa

Row: TypeAlias = dict[str, Any]
"""One output row; keys in ROW_FIELDS order. Graded rows have error None; error rows have
verdict, score, mean_score, soft_failures and results None."""

# GradeResult's fields in protobuf field order (so a JSONL line is its protobuf JSON), then error.
ROW_FIELDS = (
    "trace_id",
    "suite_id",
    "verdict",
    "score",
    "soft_failures",
    "results",
    "mean_score",
    "error",
)
# The keys of a graded row's JSONL line (an error row has trace_id, suite_id and error).
_GRADED_FIELDS = ROW_FIELDS[:-1]
# Parquet schema tag; /2 added mean_score and each result's score (SPEC §13).
SCHEMA_TAG = b"regrade-results/2"
OUTPUT_FORMATS = ("jsonl", "parquet")

_VERDICT = {v.number: v.name for v in result_pb2.DESCRIPTOR.enum_types_by_name["Verdict"].values}
_STATUS = {
    v.number: v.name for v in result_pb2.DESCRIPTOR.enum_types_by_name["AssertionStatus"].values
}
_SEVERITY = {
    v.number: v.name for v in assertion_pb2.DESCRIPTOR.enum_types_by_name["Severity"].values
}
_OUTCOME = result_pb2.TraceOutcome


def output_format(path: str) -> str:
    """jsonl or parquet, from the output file's suffix."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    raise ValueError(f"{path}: the output must end in .jsonl or .parquet")


def outcome_row(outcome: bytes, suite_id: str) -> Row:
    """One serialized TraceOutcome → its row (the protobuf JSON field names and enum names)."""
    message = _OUTCOME.FromString(outcome)
    if message.WhichOneof("outcome") == "error":
        error = message.error
        return error_row(error.trace_id, suite_id, error.reason_code, error.field, error.message)
    result = message.result
    return {
        "trace_id": result.trace_id,
        "suite_id": result.suite_id,
        "verdict": _VERDICT[result.verdict],
        "score": result.score,
        "soft_failures": result.soft_failures,
        "results": [
            {
                "name": r.name,
                "status": _STATUS[r.status],
                "severity": _SEVERITY[r.severity],
                "reason_code": r.reason_code,
                "reason": r.reason,
                "positions": list(r.positions),
                "score": r.score,
            }
            for r in result.results
        ],
        "mean_score": result.mean_score,
        "error": None,
    }


def error_row(trace_id: str, suite_id: str, reason_code: str, field: str, message: str) -> Row:
    """The row of a trace that could not be graded."""
    return {
        "trace_id": trace_id,
        "suite_id": suite_id,
        "verdict": None,
        "score": None,
        "soft_failures": None,
        "results": None,
        "mean_score": None,
        "error": {"reason_code": reason_code, "field": field, "message": message},
    }


def failure_row(failure: ReadFailure, suite_id: str) -> Row:
    """The row of an input record that is not a trace at all."""
    return error_row(failure.trace_id, suite_id, "INVALID_TRACE", failure.field, failure.message)


def jsonl_line(row: Row) -> bytes:
    """A row as one JSONL line: GradeResult JSON, or {trace_id, suite_id, error} for errors."""
    if row["error"] is not None:
        shaped = {"trace_id": row["trace_id"], "suite_id": row["suite_id"], "error": row["error"]}
    else:
        shaped = {key: row[key] for key in _GRADED_FIELDS}
    return (json.dumps(shaped, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def arrow_schema() -> pa.Schema:
    """The stable Parquet schema of result rows (documented in docs/regrade.md)."""
    import pyarrow as pa  # noqa: PLC0415  (optional dependency)

    result = pa.struct(
        [
            ("name", pa.string()),
            ("status", pa.string()),
            ("severity", pa.string()),
            ("reason_code", pa.string()),
            ("reason", pa.string()),
            ("positions", pa.list_(pa.uint32())),
            ("score", pa.float64()),
        ]
    )
    error = pa.struct(
        [("reason_code", pa.string()), ("field", pa.string()), ("message", pa.string())]
    )
    return pa.schema(
        [
            pa.field("trace_id", pa.string(), nullable=False),
            pa.field("suite_id", pa.string(), nullable=False),
            ("verdict", pa.string()),
            ("score", pa.float64()),
            ("soft_failures", pa.uint32()),
            ("results", pa.list_(result)),
            ("mean_score", pa.float64()),
            ("error", error),
        ],
        metadata={b"trajgrade.schema": SCHEMA_TAG},
    )


def arrow_table_from_jsonl(data: bytes, longest_row: int) -> pa.Table:
    """JSONL rows (the core's, or jsonl_line's) as an Arrow table: Arrow's JSON reader, in C++
    with no per-row Python; equal to Table.from_pylist of the same rows with arrow_schema()."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.json as pj  # noqa: PLC0415

    schema = arrow_schema()
    if not data:
        return schema.empty_table()
    table = pj.read_json(
        pa.py_buffer(data),
        read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest_row)),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
    )
    return table.cast(schema)


def arrow_table_from_columns(rows: int, columns: dict[str, bytes | None]) -> pa.Table:
    """The core's Arrow buffers of `rows` result rows (JsonlBlock.columns, asked for with
    arrow=True) as a table with the stable schema, no copy: equal to arrow_table_from_jsonl of
    the same rows (tests/regrade/test_summary.py)."""
    import pyarrow as pa  # noqa: PLC0415

    def buffer(name: str) -> pa.Buffer | None:
        raw = columns[name]
        return None if raw is None else pa.py_buffer(raw)

    def strings(name: str, length: int) -> pa.Array:
        parts = [buffer(f"{name}.validity"), buffer(f"{name}.offsets"), buffer(f"{name}.data")]
        return pa.Array.from_buffers(pa.string(), length, parts)

    def values(kind: pa.DataType, name: str, length: int, nullable: bool = True) -> pa.Array:
        validity = buffer(f"{name}.validity") if nullable else None
        return pa.Array.from_buffers(kind, length, [validity, buffer(f"{name}.values")])

    schema = arrow_schema()
    result_type = schema.field("results").type.value_type
    n_results = len(columns["results.score.values"] or b"") // 8
    n_positions = len(columns["results.positions.values"] or b"") // 4
    positions = pa.Array.from_buffers(
        result_type.field("positions").type, n_results,
        [None, buffer("results.positions.offsets")],
        children=[pa.Array.from_buffers(pa.uint32(), n_positions,
                                        [None, buffer("results.positions.values")])],
    )  # fmt: skip
    result_children = [
        strings(f"results.{field}", n_results)
        for field in ("name", "status", "severity", "reason_code", "reason")
    ]
    result_children += [positions, values(pa.float64(), "results.score", n_results, False)]
    results = pa.Array.from_buffers(
        schema.field("results").type, rows,
        [buffer("results.validity"), buffer("results.offsets")],
        children=[pa.Array.from_buffers(result_type, n_results, [None], children=result_children)],
    )  # fmt: skip
    error = pa.Array.from_buffers(
        schema.field("error").type, rows, [buffer("error.validity")],
        children=[strings(f"error.{field}", rows) for field in ("reason_code", "field", "message")],
    )  # fmt: skip
    batch = pa.RecordBatch.from_arrays(
        [
            strings("trace_id", rows),
            strings("suite_id", rows),
            strings("verdict", rows),
            values(pa.float64(), "score", rows),
            values(pa.uint32(), "soft_failures", rows),
            results,
            values(pa.float64(), "mean_score", rows),
            error,
        ],
        schema=schema,
    )
    return pa.Table.from_batches([batch], schema=schema)


class PartWriter:
    """The rows appended to a Parquet output since its last commit, kept durably as one Arrow
    IPC file (lz4: a fraction of the disk writes of uncompressed buffers, for little CPU): the
    Parquet output has no footer (is not readable) until the run ends, so these parts are what
    --resume rebuilds it from (part_tables); nothing else reads them. The caller renames the
    file into place after close()."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa  # noqa: PLC0415

        self._path = path
        self._sink = pa.OSFile(str(path), "wb")
        options = pa.ipc.IpcWriteOptions(compression="lz4")
        self._writer = pa.ipc.new_file(self._sink, arrow_schema(), options=options)

    def write(self, table: pa.Table) -> None:
        """One chunk's rows (a single-batch table: part_tables gives it back whole)."""
        self._writer.write_table(table)

    def close(self) -> None:
        """Finish the file and make it durable (fsync)."""
        self._writer.close()
        self._sink.close()
        with self._path.open("rb") as handle:
            os.fsync(handle.fileno())


def part_tables(path: Path) -> Iterator[pa.Table]:
    """The chunks of a part written by PartWriter, in order, memory-mapped (no copy)."""
    import pyarrow as pa  # noqa: PLC0415

    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        for index in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(index)])


# The output's columns (Parquet paths) given dictionaries and min/max statistics: all but
# those whose values are mostly distinct (ids, reasons, error fields), where both cost CPU
# and save nothing: the writer's CPU 9% lower (100k rows, 5 rounds), the file 6% larger.
_INDEXED = [
    "suite_id",
    "verdict",
    "score",
    "soft_failures",
    "results.list.element.name",
    "results.list.element.status",
    "results.list.element.severity",
    "results.list.element.reason_code",
    "results.list.element.positions.list.element",
    "results.list.element.score",
    "mean_score",
    "error.reason_code",
]


class ParquetOutput:
    """The Parquet output file being written: one row group per chunk, appended as the chunks
    are graded, so no row is encoded twice. The file has no footer until close()."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq  # noqa: PLC0415

        self._writer = pq.ParquetWriter(
            path, arrow_schema(), use_dictionary=_INDEXED, write_statistics=_INDEXED
        )
        self._path = path

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        """Write the footer and make the file durable (fsync)."""
        self._writer.close()
        with self._path.open("rb") as handle:
            os.fsync(handle.fileno())


def row_from_json(raw: dict[str, Any]) -> Row:
    if "error" in raw:
        error = raw["error"]
        return error_row(
            raw.get("trace_id", ""),
            raw.get("suite_id", ""),
            error.get("reason_code", ""),
            error.get("field", ""),
            error.get("message", ""),
        )
    score = float(raw.get("score", 0.0))
    results = []
    for r in raw.get("results", []):
        status = r.get("status", "ASSERTION_STATUS_UNSPECIFIED")
        results.append(
            {
                "name": r.get("name", ""),
                "status": status,
                "severity": r.get("severity", "SEVERITY_UNSPECIFIED"),
                "reason_code": r.get("reason_code", ""),
                "reason": r.get("reason", ""),
                "positions": list(r.get("positions", [])),
                # Rows written before SPEC v2 carry no scores: a v1 result scores 1 or 0 and a
                # v1 suite's mean_score is its score rounded (§13).
                "score": float(r.get("score", 1.0 if status == "ASSERTION_STATUS_PASS" else 0.0)),
            }
        )
    return {
        "trace_id": raw.get("trace_id", ""),
        "suite_id": raw.get("suite_id", ""),
        "verdict": raw.get("verdict", "VERDICT_UNSPECIFIED"),
        "score": score,
        "soft_failures": int(raw.get("soft_failures", 0)),
        "results": results,
        "mean_score": float(raw.get("mean_score", round(score, 4))),
        "error": None,
    }


def read_rows(path: str) -> Iterator[Row]:
    """The rows of a results file (JSONL or Parquet), in file order, streaming."""
    if output_format(path) == "jsonl":
        with open(path, "rb") as handle:
            for line in handle:
                if line.strip():
                    yield row_from_json(json.loads(line))
        return
    import pyarrow.parquet as pq  # noqa: PLC0415

    parquet = pq.ParquetFile(path)
    current = parquet.schema_arrow.metadata or {}
    if current.get(b"trajgrade.schema") == SCHEMA_TAG:
        for batch in parquet.iter_batches(batch_size=4096):
            yield from batch.to_pylist()
        return
    # An older schema (no scores): each row through the JSON reader's defaults.
    for batch in parquet.iter_batches(batch_size=4096):
        for raw in batch.to_pylist():
            if raw.get("error") is not None:
                yield row_from_json({k: v for k, v in raw.items() if k != "results"})
            else:
                yield row_from_json({k: v for k, v in raw.items() if v is not None})
