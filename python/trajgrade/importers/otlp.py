"""OTLP importer: spans (OTLP JSON or protobuf) and GenAI log events to Traces."""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from trajgrade import _core
from trajgrade.importers.report import (
    INVALID_RECORD,
    LOG_WITHOUT_TRACE,
    ImportReport,
)
from trajgrade.v1 import trace_pb2

BINARY_SUFFIXES = frozenset({".pb", ".binpb", ".protobuf", ".otlp"})
# An LLM-reported tool call and an executed-tool span without a shared id are the same call
# only if the execution starts within this window after the model's response.
DEFAULT_DEDUPE_WINDOW_S = 300.0


@dataclass(slots=True)
class _Event:
    trace_id: str
    span_id: str
    name: str
    body: Any
    time: int
    order: int
    # The LogRecord's protobuf bytes: what the core's mapping reads.
    raw: bytes = b""


# The log events the live receiver holds until their run completes (the core maps `raw`).
EventRecord = _Event


def read(
    paths: Iterable[Path],
    report: ImportReport,
    *,
    logs: Iterable[Path] = (),
    group_by: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
) -> Iterator[trace_pb2.Trace]:
    """Read every OTLP traces file (and optional OTLP logs files), then yield one Trace per group.

    All inputs are read before the first Trace is yielded: the spans of one trace may be
    spread over many export batches and files.
    """
    return from_requests(
        (request for path in paths for request in load_trace_requests(path, report)),
        report,
        logs=(request for path in logs for request in load_log_requests(path, report)),
        group_by=group_by,
        dedupe_window_s=dedupe_window_s,
    )


def load_trace_requests(path: Path, report: ImportReport) -> Iterator[ExportTraceServiceRequest]:
    """Parse an OTLP traces file: JSON (one request per line or one document) or protobuf."""
    for where, message in _load(path, report, ExportTraceServiceRequest):
        if isinstance(message, ExportTraceServiceRequest):
            yield message
        else:
            report.add(INVALID_RECORD, where, "not an OTLP traces request")


def load_log_requests(path: Path, report: ImportReport) -> Iterator[ExportLogsServiceRequest]:
    """Parse an OTLP logs file: JSON (one request per line or one document) or protobuf."""
    for where, message in _load(path, report, ExportLogsServiceRequest):
        if isinstance(message, ExportLogsServiceRequest):
            yield message
        else:
            report.add(INVALID_RECORD, where, "not an OTLP logs request")


def is_binary(path: Path) -> bool:
    """True when the file holds protobuf bytes rather than JSON text."""
    if path.suffix.lower() in BINARY_SUFFIXES:
        return True
    with path.open("rb") as handle:
        head = handle.read(64).lstrip()
    return bool(head) and head[:1] not in (b"{", b"[")


def _load(
    path: Path,
    report: ImportReport,
    message_type: type[ExportTraceServiceRequest] | type[ExportLogsServiceRequest],
) -> Iterator[tuple[str, ExportTraceServiceRequest | ExportLogsServiceRequest]]:
    if is_binary(path):
        data = path.read_bytes()
        for number, chunk in enumerate(_split_length_prefixed(data)):
            message = message_type()
            try:
                message.ParseFromString(chunk)
            except DecodeError as exc:
                report.add(INVALID_RECORD, f"{path.name} message {number}", str(exc))
                continue
            yield f"{path.name} message {number}", message
        return
    for where, document in _json_documents(path, report):
        message = message_type()
        try:
            parse_json_request(document, message)
        except (json_format.ParseError, TypeError, ValueError) as exc:
            report.add(INVALID_RECORD, where, str(exc))
            continue
        yield where, message


def parse_json_request(
    document: Any, message: ExportTraceServiceRequest | ExportLogsServiceRequest
) -> None:
    """Fill an export request from its OTLP/JSON document (hex ids; unknown fields ignored)."""
    json_format.ParseDict(_hex_ids_to_base64(document), message, ignore_unknown_fields=True)


def _split_length_prefixed(data: bytes) -> list[bytes]:
    """One serialized message, or the collector's proto file format (4-byte big-endian sizes).

    Length-prefixed framing is assumed only when the prefixes tile the file exactly.
    """
    chunks: list[bytes] = []
    offset = 0
    while offset + 4 <= len(data):
        (size,) = struct.unpack(">I", data[offset : offset + 4])
        if offset + 4 + size > len(data):
            break
        chunks.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    if chunks and offset == len(data):
        return chunks
    return [data]


def _json_documents(path: Path, report: ImportReport) -> Iterator[tuple[str, Any]]:
    # Plain json (floats) on purpose: OTLP numbers are double/int64 fields, and the
    # protobuf JSON parser does not take Decimal.
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        first = json.loads(lines[0]) if lines else None
    except ValueError:
        first = None
    if first is None:
        try:
            yield path.name, json.loads(text)
        except ValueError as exc:
            report.add(INVALID_RECORD, path.name, str(exc))
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path.name}:{number}", json.loads(line)
        except ValueError as exc:
            report.add(INVALID_RECORD, f"{path.name}:{number}", str(exc))


_ID_KEYS = {
    "traceId": 16,
    "spanId": 8,
    "parentSpanId": 8,
    "trace_id": 16,
    "span_id": 8,
    "parent_span_id": 8,
}
_HEX = re.compile(r"^[0-9a-fA-F]*$")


def _hex_ids_to_base64(value: Any) -> Any:
    """OTLP JSON writes trace and span ids as hex, the protobuf JSON mapping wants base64."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            size = _ID_KEYS.get(key)
            if (
                size is not None
                and isinstance(item, str)
                and len(item) == 2 * size
                and _HEX.match(item)
            ):
                out[key] = base64.b64encode(bytes.fromhex(item)).decode("ascii")
            else:
                out[key] = _hex_ids_to_base64(item)
        return out
    if isinstance(value, list):
        return [_hex_ids_to_base64(item) for item in value]
    return value


def any_value(value: AnyValue) -> Any:  # noqa: PLR0911 - one return per AnyValue case
    """An OTLP AnyValue as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """A KeyValue list as a dict (a repeated key keeps its last value)."""
    return {pair.key: any_value(pair.value) for pair in pairs}


def from_requests(
    requests: Iterable[ExportTraceServiceRequest],
    report: ImportReport,
    *,
    logs: Iterable[ExportLogsServiceRequest] = (),
    group_by: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
) -> Iterator[trace_pb2.Trace]:
    """Map parsed OTLP requests to Traces: one per trace id, or per value of `group_by` (the
    core's mapping, the one live grading uses too)."""
    return _map_bytes(
        [request.SerializeToString() for request in requests],
        [request.SerializeToString() for request in logs],
        report,
        group_by=group_by,
        dedupe_window_s=dedupe_window_s,
    )


def _map_bytes(
    traces: list[bytes],
    logs: list[bytes],
    report: ImportReport,
    *,
    group_by: str | None,
    dedupe_window_s: float,
) -> Iterator[trace_pb2.Trace]:
    out, (n_traces, calls, model_calls, merged, collisions, unmapped) = _core.map_otlp(
        traces, logs, group_by, dedupe_window_s
    )
    report.traces += n_traces
    report.calls += calls
    report.model_calls += model_calls
    report.merged_duplicates += merged
    report.id_collisions += collisions
    for reason, count, examples in unmapped:
        report.merge(reason, count, examples)
    return iter([trace_pb2.Trace.FromString(trace) for trace in out])


def event_records(
    request: ExportLogsServiceRequest, report: ImportReport, first_order: int = 0
) -> list[EventRecord]:
    """The `gen_ai.*` log events of one logs export request that name a trace."""
    out: list[EventRecord] = []
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attrs = attributes(record.attributes)
                name = record.event_name or str(attrs.get("event.name", ""))
                if not name.startswith("gen_ai."):
                    continue
                if not record.trace_id.strip(b"\0"):
                    report.add(LOG_WITHOUT_TRACE, f"log event {name}", "no trace id")
                    continue
                out.append(
                    _Event(
                        raw=record.SerializeToString(),
                        trace_id=record.trace_id.hex(),
                        span_id=record.span_id.hex(),
                        name=name,
                        body=any_value(record.body),
                        time=record.time_unix_nano or record.observed_time_unix_nano,
                        order=first_order + len(out),
                    )
                )
    return out
