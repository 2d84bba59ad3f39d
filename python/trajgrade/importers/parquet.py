"""Parquet: one row per trace, calls as a list of structs, read one record batch at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trajgrade.importers.records import scalar_text
from trajgrade.importers.report import INVALID_RECORD, UNKNOWN_COLUMN, ImportReport
from trajgrade.v1 import trace_pb2

CALL_TYPE = pa.struct(
    [
        ("name", pa.string()),
        ("arguments_json", pa.string()),
        ("result", pa.string()),
        ("error", pa.bool_()),
        ("id", pa.string()),
        ("start_time_unix_nano", pa.uint64()),
        ("end_time_unix_nano", pa.uint64()),
        # SPEC v2 (§10): 0 / "" = not recorded.
        ("turn", pa.uint32()),
        ("agent", pa.string()),
        ("server", pa.string()),
    ]
)
MODEL_CALL_TYPE = pa.struct(
    [
        ("model", pa.string()),
        ("input_tokens", pa.uint64()),
        ("output_tokens", pa.uint64()),
        ("cost", pa.float64()),  # null = not recorded
        ("turn", pa.uint32()),
        ("agent", pa.string()),
        ("start_time_unix_nano", pa.uint64()),
        ("end_time_unix_nano", pa.uint64()),
    ]
)
TURN_TYPE = pa.struct([("user_input", pa.string()), ("final_answer", pa.string())])
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("calls", pa.list_(CALL_TYPE)),
        ("final_answer", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("model_calls", pa.list_(MODEL_CALL_TYPE)),
        ("turns", pa.list_(TURN_TYPE)),
    ]
)
_CALL_FIELDS = frozenset(CALL_TYPE.names)
_MODEL_CALL_FIELDS = frozenset(MODEL_CALL_TYPE.names)
_TURN_FIELDS = frozenset(TURN_TYPE.names)
_ROW_FIELDS = frozenset(SCHEMA.names)
# Rows per record batch: bounds memory for files with millions of traces.
BATCH_ROWS = 4096


def read(
    path: Path, report: ImportReport, *, batch_rows: int = BATCH_ROWS
) -> Iterator[trace_pb2.Trace]:
    """Yield one Trace per row. Null `arguments_json` / `result` mean "not recorded"."""
    parquet = pq.ParquetFile(path)
    for column in parquet.schema_arrow.names:
        if column not in _ROW_FIELDS:
            report.add(UNKNOWN_COLUMN, path.name, f"column {column!r}")
    reported_call_fields: set[str] = set()
    row_number = 0
    for batch in parquet.iter_batches(batch_size=batch_rows):
        for row in batch.to_pylist():
            where = f"{path.name} row {row_number}"
            row_number += 1
            try:
                trace = _trace(row, where, report, reported_call_fields)
            except (TypeError, ValueError) as exc:
                report.add(INVALID_RECORD, where, str(exc))
                continue
            report.traces += 1
            report.calls += len(trace.calls)
            report.model_calls += len(trace.model_calls)
            yield trace


def _trace(
    row: dict[str, Any], where: str, report: ImportReport, reported: set[str]
) -> trace_pb2.Trace:
    trace = trace_pb2.Trace(id=row.get("id") or "", final_answer=row.get("final_answer") or "")
    for call_row in row.get("calls") or []:
        _report_unknown(call_row, "calls", _CALL_FIELDS, where, report, reported)
        call = trace.calls.add(
            name=call_row.get("name") or "",
            error=bool(call_row.get("error")),
            turn=call_row.get("turn") or 0,
            agent=call_row.get("agent") or "",
            server=call_row.get("server") or "",
        )
        if call_row.get("arguments_json") is not None:
            call.arguments_json = call_row["arguments_json"]
        if call_row.get("result") is not None:
            call.result = call_row["result"]
        call.id = call_row.get("id") or ""
        call.start_time_unix_nano = call_row.get("start_time_unix_nano") or 0
        call.end_time_unix_nano = call_row.get("end_time_unix_nano") or 0
    for model_row in row.get("model_calls") or []:
        _report_unknown(model_row, "model_calls", _MODEL_CALL_FIELDS, where, report, reported)
        # Null is "not recorded" (cost) or the default; the constructor checks types and ranges.
        trace.model_calls.add(
            **{k: v for k, v in model_row.items() if k in _MODEL_CALL_FIELDS and v is not None}
        )
    for turn_row in row.get("turns") or []:
        _report_unknown(turn_row, "turns", _TURN_FIELDS, where, report, reported)
        trace.turns.add(
            user_input=turn_row.get("user_input") or "",
            final_answer=turn_row.get("final_answer") or "",
        )
    metadata = row.get("metadata")
    # A map column reads back as (key, value) pairs; a struct column as a dict.
    pairs = metadata.items() if isinstance(metadata, dict) else metadata or []
    for key, value in pairs:
        text = scalar_text(value)
        if text is not None:
            trace.metadata[str(key)] = text
    return trace


def _report_unknown(  # noqa: PLR0917 - where and what, then the report and its memory
    record: dict[str, Any],
    column: str,
    known: frozenset[str],
    where: str,
    report: ImportReport,
    reported: set[str],
) -> None:
    for key in record:
        tag = f"{column}.{key}"
        if key not in known and tag not in reported:
            reported.add(tag)
            report.add(UNKNOWN_COLUMN, where, f"{column} field {key!r}")


def write(traces: Iterable[trace_pb2.Trace], path: Path, *, batch_rows: int = BATCH_ROWS) -> int:
    """Write traces in the schema `read` expects, one record batch at a time."""
    count = 0
    with pq.ParquetWriter(path, SCHEMA) as writer:
        rows: list[dict[str, Any]] = []
        for trace in traces:
            rows.append(_row(trace))
            count += 1
            if len(rows) >= batch_rows:
                writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
                rows = []
        if rows:
            writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
    return count


def _row(trace: trace_pb2.Trace) -> dict[str, Any]:
    return {
        "id": trace.id,
        "final_answer": trace.final_answer,
        "metadata": list(trace.metadata.items()),
        "calls": [
            {
                "name": call.name,
                "arguments_json": call.arguments_json if call.HasField("arguments_json") else None,
                "result": call.result if call.HasField("result") else None,
                "error": call.error,
                "id": call.id,
                "start_time_unix_nano": call.start_time_unix_nano,
                "end_time_unix_nano": call.end_time_unix_nano,
                "turn": call.turn,
                "agent": call.agent,
                "server": call.server,
            }
            for call in trace.calls
        ],
        "model_calls": [
            {
                "model": m.model,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
                "cost": m.cost if m.HasField("cost") else None,
                "turn": m.turn,
                "agent": m.agent,
                "start_time_unix_nano": m.start_time_unix_nano,
                "end_time_unix_nano": m.end_time_unix_nano,
            }
            for m in trace.model_calls
        ],
        "turns": [
            {"user_input": t.user_input, "final_answer": t.final_answer} for t in trace.turns
        ],
    }
