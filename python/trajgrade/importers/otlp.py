"""OTLP importer: spans (OTLP JSON or protobuf) and GenAI log events to Traces."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from trajgrade import _core
from trajgrade.importers import exact_json, otlp_usage
from trajgrade.importers.conversation_turns import TurnTimeline
from trajgrade.importers.otlp_tree import SpanKey, SpanTree
from trajgrade.importers.records import dumps_untrusted
from trajgrade.importers.report import (
    INVALID_ATTRIBUTE_JSON,
    INVALID_RECORD,
    LOG_WITHOUT_TRACE,
    MISSING_GROUP_ATTRIBUTE,
    MODEL_CALL_WITHOUT_USAGE,
    TOOL_CALL_WITHOUT_NAME,
    UNMAPPED_ATTRIBUTE,
    ImportReport,
)
from trajgrade.v1 import trace_pb2

BINARY_SUFFIXES = frozenset({".pb", ".binpb", ".protobuf", ".otlp"})
# An LLM-reported tool call and an executed-tool span without a shared id are the same call
# only if the execution starts within this window after the model's response.
DEFAULT_DEDUPE_WINDOW_S = 300.0
# Clock skew tolerated when the execution span appears to start before the LLM span ended.
_SKEW_NS = 1_000_000_000

_OI_OUTPUT_CALL = re.compile(
    r"^llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)$"
)
_OI_OUTPUT_CONTENT = re.compile(r"^llm\.output_messages\.(\d+)\.message\.(role|content)$")
_OI_INPUT_MESSAGE = re.compile(
    r"^llm\.input_messages\.(\d+)\.message\.(role|content|tool_call_id)$"
)
# Attributes of a tool span that describe the tool, not the call: not run data, not reported.
_DESCRIPTIVE = frozenset(
    {
        "tool.description",
        "tool.type",
        "tool.parameters",
        "gen_ai.tool.description",
        "gen_ai.tool.type",
    }
)
# Per convention: the attribute namespaces of a call, and the keys read from them. Any other
# key of those namespaces on a tool span is counted as UNMAPPED_ATTRIBUTE.
_TOOL_NAMESPACES = ("tool.", "tool_call.", "gen_ai.tool.", "input.", "output.")
_READ = {
    "genai": frozenset(
        {
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        }
    ),
    "openinference": frozenset(
        {
            "tool.name",
            "tool_call.function.name",
            "tool_call.id",
            "tool.id",
            "tool_call.function.arguments",
            "input.value",
            "input.mime_type",
            "output.value",
            "output.mime_type",
        }
    ),
    "plain": frozenset(
        {"tool.name", "tool.arguments", "tool.result", "tool.output", "tool.call.id"}
    ),
}
# MCP tool call spans (client or server side), and the tool name in their span names when no
# attribute carries it: `tools/call <tool>` (the MCP conventions), `MCP handle tools/call
# <tool>` / `MCP send tools/call <tool>` (the MCP Python SDK).
_MCP_TOOL_CALL = "tools/call"
_MCP_SPAN_NAME = re.compile(r"(?:^|\s)tools/call\s+(\S+)$")


@dataclass
class _Span:
    trace_id: str
    span_id: str
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    order: int
    parent: str = ""
    kind: int = 0
    # The span's and its resource's protobuf bytes: what the core's mapping reads.
    raw: bytes = b""
    resource_raw: bytes = b""

    @property
    def key(self) -> SpanKey:
        return (self.trace_id, self.span_id)

    @property
    def anchor(self) -> tuple[int, int]:
        """Where the span sits in time, for its turn."""
        return (self.start, self.order)


@dataclass
class _Event:
    trace_id: str
    span_id: str
    name: str
    body: Any
    time: int
    order: int
    # The LogRecord's protobuf bytes: what the core's mapping reads.
    raw: bytes = b""


@dataclass
class _Call:
    name: str
    arguments: str | None
    call_id: str
    time: int
    order: int
    sub: int
    result: str | None = None
    error: bool = False
    start: int = 0
    end: int = 0
    executed: bool = False
    # True when the arguments are a re-serialisation of the function's parameters
    # (OpenInference `input.value`), not the call's own argument text.
    weak_arguments: bool = False
    # The span that reported the call (execution span, or the LLM span that requested it) and
    # where it sits in time for its turn: (span start, span order).
    span: SpanKey | None = None
    anchor: tuple[int, int] = (0, 0)
    # An MCP `tools/call` span; `server` is the MCP server or toolset that served it.
    mcp: bool = False
    server: str = ""


@dataclass
class _Group:
    key: str
    trace_ids: list[str] = field(default_factory=list)
    spans: list[_Span] = field(default_factory=list)
    events: list[_Event] = field(default_factory=list)


# The records the mapping reads (decoded once, on arrival, by the live receiver).
SpanRecord = _Span
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


def map_records(
    spans: list[SpanRecord],
    events: list[EventRecord],
    report: ImportReport,
    *,
    group_by: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
) -> Iterator[trace_pb2.Trace]:
    """Map spans and events received live (their raw bytes, in `order`) with the core's
    mapping: the same Traces as the spans exported to a file and imported."""
    spans_request = b"".join(
        _field(1, _field(1, span.resource_raw) + _field(2, _field(2, span.raw)))
        for span in sorted(spans, key=lambda s: s.order)
    )
    logs_request = b"".join(
        _field(1, _field(2, _field(2, event.raw)))
        for event in sorted(events, key=lambda e: e.order)
    )
    return _map_bytes(
        [spans_request],
        [logs_request] if events else [],
        report,
        group_by=group_by,
        dedupe_window_s=dedupe_window_s,
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (composing requests from parts' bytes)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


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


def span_record(span: OtlpSpan, resource: dict[str, Any], order: int) -> SpanRecord:
    """One OTLP span as the mapping reads it (`order`: its place in arrival order)."""
    return _Span(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        name=span.name,
        start=span.start_time_unix_nano,
        end=span.end_time_unix_nano or span.start_time_unix_nano,
        attrs=attributes(span.attributes),
        resource=resource,
        status_code=span.status.code,
        order=order,
        parent=span.parent_span_id.hex(),
        kind=span.kind,
    )


def span_records(request: ExportTraceServiceRequest, first_order: int = 0) -> list[SpanRecord]:
    """Every span of one export request, in request order."""
    out: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(span_record(span, resource, first_order + len(out)))
    return out


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


def map_spans(
    spans: list[SpanRecord],
    events: list[EventRecord],
    report: ImportReport,
    *,
    group_by: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
) -> Iterator[trace_pb2.Trace]:
    """THE span-to-Trace mapping: `trajgrade import`, `regrade` of OTLP files and live grading
    (trajgrade.live) all come through here, so a run graded live and its spans regraded from
    a file give the same Trace. One Trace per trace id, or per value of `group_by`; a group
    depends only on its own spans and events and their relative order."""
    window_ns = int(dedupe_window_s * 1_000_000_000)
    for group in _group(spans, events, group_by, report):
        yield _trace(group, report, window_ns)


def _group(  # noqa: PLR0912 - two grouping modes over spans and events
    spans: list[_Span], events: list[_Event], group_by: str | None, report: ImportReport
) -> list[_Group]:
    key_of_trace: dict[str, str] = {}
    if group_by is None:
        for span in spans:
            key_of_trace.setdefault(span.trace_id, span.trace_id)
        for event in events:
            key_of_trace.setdefault(event.trace_id, event.trace_id)
    else:
        for span in spans:
            value = span.attrs.get(group_by, span.resource.get(group_by))
            if value is not None and span.trace_id not in key_of_trace:
                key_of_trace[span.trace_id] = str(value)
        for trace_id in dict.fromkeys(s.trace_id for s in spans):
            if trace_id not in key_of_trace:
                report.add(MISSING_GROUP_ATTRIBUTE, f"trace {trace_id}", f"no {group_by!r}")
    groups: dict[str, _Group] = {}
    for span in spans:
        key = key_of_trace.get(span.trace_id)
        if key is None:
            continue
        group = groups.setdefault(key, _Group(key))
        if span.trace_id not in group.trace_ids:
            group.trace_ids.append(span.trace_id)
        group.spans.append(span)
    for event in events:
        key = key_of_trace.get(event.trace_id)
        if key is None:
            report.add(LOG_WITHOUT_TRACE, f"log event {event.name}", f"trace {event.trace_id}")
            continue
        groups.setdefault(key, _Group(key, [event.trace_id])).events.append(event)
    return list(groups.values())


def _list(value: Any) -> list[Any]:
    """A list attribute of parsed, untrusted JSON; anything else holds nothing to read."""
    return value if isinstance(value, list) else []


def _text_or_json(value: Any) -> str:
    return value if isinstance(value, str) else dumps_untrusted(value)


class _Extractor:
    """Collects executed calls, LLM-reported calls, results and answers of one group."""

    def __init__(self, report: ImportReport, where: str, spans: list[_Span]) -> None:
        self.report = report
        self.where = where
        self.tree = SpanTree(spans)
        self.executed: list[_Call] = []
        self.requested: list[_Call] = []
        # Tool results by call id, then by the span whose model input (or events) held them, in
        # input order: a later model input repeats the whole history, so the longest list of
        # one source has every result of that id, the k-th for the k-th call with the id.
        self.results: dict[str, dict[str, list[str]]] = {}
        # (time, order, text, span of the LLM output): the span gives the answer's turn and agent.
        self.answers: list[tuple[int, int, str, SpanKey | None]] = []
        self.spans_with_outputs: set[str] = set()
        # The user messages of each model input, by LLM span, in conversation order.
        self.user_texts: dict[SpanKey, list[str]] = {}
        self.model_spans: list[_Span] = []
        # Spans with a model call below them: their own usage would count that call twice.
        self.above_model: set[SpanKey] = set()
        for span in spans:
            if otlp_usage.is_model_span(span.attrs):
                for ancestor in self.tree.ancestors(span.key):
                    if ancestor in self.above_model:
                        break  # marked from another model span, and so is all above it
                    self.above_model.add(ancestor)

    def span(self, span: _Span) -> None:
        attrs = span.attrs
        kind = attrs.get("openinference.span.kind")
        convention = None
        mcp = attrs.get("mcp.method.name") == _MCP_TOOL_CALL
        if otlp_usage.is_model_span(attrs) and span.key not in self.above_model:
            self.model_spans.append(span)
        if attrs.get("gen_ai.operation.name") == "execute_tool" or mcp:
            convention = "genai"
            self.execution(
                span,
                attrs.get("gen_ai.tool.name") or (_mcp_tool_name(span) if mcp else None),
                attrs.get("gen_ai.tool.call.id"),
                attrs.get("gen_ai.tool.call.arguments"),
                attrs.get("gen_ai.tool.call.result"),
                error="error.type" in attrs,
                mcp=mcp,
            )
        elif kind == "TOOL":
            convention = "openinference"
            arguments = attrs.get("tool_call.function.arguments")
            weak = False
            if arguments is None and attrs.get("input.mime_type") == "application/json":
                arguments = attrs.get("input.value")
                weak = arguments is not None
            self.execution(
                span,
                attrs.get("tool.name") or attrs.get("tool_call.function.name"),
                attrs.get("tool_call.id") or attrs.get("tool.id"),
                arguments,
                attrs.get("output.value"),
                error=False,
                weak_arguments=weak,
            )
        elif kind is None and "tool.name" in attrs:
            convention = "plain"
            result = attrs.get("tool.result")
            self.execution(
                span,
                attrs.get("tool.name"),
                attrs.get("tool.call.id"),
                attrs.get("tool.arguments"),
                # `tool.output` is what promptfoo-traced agents write (the article's spans).
                attrs.get("tool.output") if result is None else result,
                error=False,
            )
            if result is not None and "tool.output" in attrs:
                self.unmapped(span, "tool.output", "the call's result is taken from tool.result")
        self.unread(span, convention)
        if isinstance(attrs.get("gen_ai.output.messages"), str):
            self.genai_output(span, attrs["gen_ai.output.messages"])
        elif any(key.startswith("llm.output_messages.") for key in attrs):
            self.openinference_output(span)
        if isinstance(attrs.get("gen_ai.input.messages"), str):
            self.genai_input(span, attrs["gen_ai.input.messages"])
        if any(key.startswith("llm.input_messages.") for key in attrs):
            self.openinference_input(span)

    def unmapped(self, span: _Span, key: str, why: str) -> None:
        self.report.add(UNMAPPED_ATTRIBUTE, f"{self.where} span {span.span_id}", f"{key}: {why}")

    def unread(self, span: _Span, convention: str | None) -> None:
        """Count what a span carries that no Trace field holds (never "everything mapped")."""
        read = _READ.get(convention or "", frozenset())
        aggregate = span.key in self.above_model
        for key in span.attrs:
            if key.startswith(otlp_usage.USAGE_PREFIXES):
                if aggregate:
                    self.unmapped(span, key, "usage of a span with model calls below it")
                elif key not in otlp_usage.READ_KEYS:
                    self.unmapped(span, key, "no ModelCall field holds it")
            elif (
                convention is not None
                and key.startswith(_TOOL_NAMESPACES)
                and key not in read
                and key not in _DESCRIPTIVE
            ):
                self.unmapped(span, key, f"not read for a {convention} tool span")

    def execution(
        self,
        span: _Span,
        name: Any,
        call_id: Any,
        arguments: Any,
        result: Any,
        *,
        error: bool,
        weak_arguments: bool = False,
        mcp: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            self.report.add(TOOL_CALL_WITHOUT_NAME, f"{self.where} span {span.span_id}", span.name)
            return
        call = _Call(
            name=name,
            arguments=None if arguments is None else _text_or_json(arguments),
            call_id=str(call_id or ""),
            time=span.start,
            order=span.order,
            sub=0,
            result=None if result is None else _text_or_json(result),
            error=error or span.status_code == Status.STATUS_CODE_ERROR,
            start=span.start,
            end=span.end,
            executed=True,
            weak_arguments=weak_arguments,
            span=span.key,
            anchor=(span.start, span.order),
            mcp=mcp,
        )
        self.executed.append(call)

    def request(
        self,
        name: Any,
        call_id: Any,
        arguments: Any,
        time: int,
        order: int,
        *,
        source: _Span | None = None,
    ) -> None:
        """A call the model asked for; `source` is its LLM span, when known."""
        if not isinstance(name, str) or not name:
            self.report.add(TOOL_CALL_WITHOUT_NAME, f"{self.where} LLM output", "tool call")
            return
        self.requested.append(
            _Call(
                name=name,
                arguments=None if arguments is None else _text_or_json(arguments),
                call_id=str(call_id or ""),
                time=time,
                order=order,
                sub=len(self.requested),
                span=None if source is None else source.key,
                anchor=(time, order) if source is None else (source.start, source.order),
            )
        )

    def parse(self, text: str, span: _Span, key: str) -> Any:
        try:
            # Exact numbers: the instrumentation wrote arguments as objects inside this text.
            return exact_json.loads(text)
        except ValueError as exc:
            self.report.add(
                INVALID_ATTRIBUTE_JSON, f"{self.where} span {span.span_id}", f"{key}: {exc}"
            )
            return None

    def genai_output(self, span: _Span, text: str) -> None:
        messages = self.parse(text, span, "gen_ai.output.messages")
        if not isinstance(messages, list):
            return
        self.spans_with_outputs.add(span.span_id)
        for message in messages:
            if not isinstance(message, dict):
                continue
            texts = []
            for part in _list(message.get("parts")):
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "tool_call":
                    self.request(
                        part.get("name"),
                        part.get("id"),
                        part.get("arguments"),
                        span.end,
                        span.order,
                        source=span,
                    )
                elif part.get("type") == "text" and isinstance(part.get("content"), str):
                    texts.append(part["content"])
            if texts:
                self.answers.append((span.end, span.order, "".join(texts), span.key))

    def genai_input(self, span: _Span, text: str) -> None:
        messages = self.parse(text, span, "gen_ai.input.messages")
        users = self.user_texts.setdefault(span.key, [])
        for message in messages if isinstance(messages, list) else []:
            texts = []
            responses = False
            for part in _list(message.get("parts")) if isinstance(message, dict) else []:
                if isinstance(part, dict) and part.get("type") == "tool_call_response":
                    responses = True
                    call_id = part.get("id")
                    if isinstance(call_id, str) and call_id and "response" in part:
                        self.result(call_id, span.span_id, _text_or_json(part["response"]))
                elif (
                    isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("content"), str)
                ):
                    texts.append(part["content"])
            # A user message that only carries tool results continues the turn.
            is_user = isinstance(message, dict) and message.get("role") == "user"
            if is_user and not (responses and not texts):
                users.append("".join(texts))

    def openinference_output(self, span: _Span) -> None:
        self.spans_with_outputs.add(span.span_id)
        found: dict[tuple[int, int], dict[str, Any]] = {}
        contents: dict[int, dict[str, Any]] = {}
        for key, value in span.attrs.items():
            match = _OI_OUTPUT_CALL.match(key)
            if match:
                found.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
                continue
            match = _OI_OUTPUT_CONTENT.match(key)
            if match:
                contents.setdefault(int(match[1]), {})[match[2]] = value
        for _, fields in sorted(found.items()):
            self.request(
                fields.get("function.name"),
                fields.get("id"),
                fields.get("function.arguments"),
                span.end,
                span.order,
                source=span,
            )
        for _, message in sorted(contents.items()):
            if (
                message.get("role", "assistant") == "assistant"
                and isinstance(message.get("content"), str)
                and message["content"]
            ):
                self.answers.append((span.end, span.order, message["content"], span.key))

    def openinference_input(self, span: _Span) -> None:
        messages: dict[int, dict[str, Any]] = {}
        for key, value in span.attrs.items():
            match = _OI_INPUT_MESSAGE.match(key)
            if match:
                messages.setdefault(int(match[1]), {})[match[2]] = value
        users = self.user_texts.setdefault(span.key, [])
        for _, message in sorted(messages.items()):
            call_id = message.get("tool_call_id")
            if message.get("role") == "tool" and isinstance(call_id, str) and call_id:
                self.result(call_id, span.span_id, _text_or_json(message.get("content", "")))
            elif message.get("role") == "user":
                content = message.get("content")
                users.append(content if isinstance(content, str) else "")

    def event(self, event: _Event, span_order: int, source: _Span | None) -> None:
        """One `gen_ai.*` log event; `source` is the span it was logged in, when exported."""
        body = event.body if isinstance(event.body, dict) else {}
        if event.name == "gen_ai.user.message":
            content = body.get("content")
            key = (event.trace_id, event.span_id)
            self.user_texts.setdefault(key, []).append(content if isinstance(content, str) else "")
        elif event.name == "gen_ai.choice":
            if event.span_id in self.spans_with_outputs:
                # The same response is already on the span (gen_ai.output.messages).
                return
            message = body.get("message")
            if not isinstance(message, dict):
                return
            for tool_call in _list(message.get("tool_calls")):
                function = tool_call.get("function") if isinstance(tool_call, dict) else None
                if isinstance(function, dict):
                    self.request(
                        function.get("name"),
                        tool_call.get("id"),
                        function.get("arguments"),
                        event.time,
                        span_order,
                        source=source,
                    )
            if isinstance(message.get("content"), str) and message["content"]:
                answered_in = None if source is None else source.key
                self.answers.append((event.time, span_order, message["content"], answered_in))
        elif event.name == "gen_ai.tool.message":
            call_id = body.get("id")
            if isinstance(call_id, str) and call_id and "content" in body:
                self.result(call_id, f"event {event.span_id}", _text_or_json(body["content"]))

    def result(self, call_id: str, source: str, text: str) -> None:
        self.results.setdefault(call_id, {}).setdefault(source, []).append(text)


def _same_arguments(left: str | None, right: str | None) -> bool:
    if left is None or right is None:
        return True
    if left == right:
        return True
    try:
        return bool(exact_json.loads(left) == exact_json.loads(right))
    except ValueError:
        return False


def _equal_arguments(left: str | None, right: str | None) -> bool:
    """Both unrecorded, or equal JSON values (the same call reported twice)."""
    if left is None or right is None:
        return left is right
    return _same_arguments(left, right)


def _dedupe_requested(extractor: _Extractor, report: ImportReport) -> list[_Call]:
    """Requested calls with one id are one call only when name and arguments agree too:
    models reuse ids across turns (gpt-4o in tau-bench runs), and those are distinct calls."""
    kept: list[_Call] = []
    by_id: dict[str, list[_Call]] = {}
    for call in extractor.requested:
        same_id = by_id.get(call.call_id, []) if call.call_id else []
        if any(
            c.name == call.name and _equal_arguments(c.arguments, call.arguments) for c in same_id
        ):
            report.merged_duplicates += 1
            continue
        if same_id:
            report.id_collisions += 1
        by_id.setdefault(call.call_id, []).append(call)
        kept.append(call)
    return kept


def _mcp_tool_name(span: _Span) -> str | None:
    """The tool of an MCP `tools/call` span without `gen_ai.tool.name`."""
    name = span.attrs.get("mcp.tool.name")
    if isinstance(name, str) and name:
        return name
    match = _MCP_SPAN_NAME.search(span.name)
    return match[1] if match else None


def _server_of(group: list[_Span]) -> str:
    """Which MCP server the spans of one MCP call name (`group[0]` is the outermost).

    The MCP conventions define no server-name attribute, so, first found over the group:
    `mcp.server.name` (the key instrumentations and frameworks write), the client side's
    `server.address` (with `server.port`), and for a server-side span exported by another
    process (context travels in the request's `_meta`), that process's `service.name`.
    """
    for span in group:
        name = span.attrs.get("mcp.server.name")
        if isinstance(name, str) and name:
            return name
    for span in group:
        address = span.attrs.get("server.address")
        port = span.attrs.get("server.port")
        if isinstance(address, str) and address:
            has_port = isinstance(port, int) and not isinstance(port, bool)
            return f"{address}:{port}" if has_port else address
    caller = group[0].resource.get("service.name")
    for span in group:
        service = span.resource.get("service.name")
        if (
            span.kind == OtlpSpan.SPAN_KIND_SERVER
            and isinstance(service, str)
            and service
            and service != caller
        ):
            return service
    return ""


def _merge_mcp(extractor: _Extractor, spans: dict[SpanKey, _Span], report: ImportReport) -> None:
    """One call per MCP tool call: an execution span under another of the same tool, one of
    them MCP (an agent's tool span wrapping the MCP client span, or the MCP server span under
    the client span), is the same call. The outermost span is kept; the inner ones fill what
    it lacks (arguments, result, id) and give the server."""
    by_span = {call.span: call for call in extractor.executed if call.span is not None}
    into: dict[SpanKey, SpanKey] = {}
    for call in extractor.executed:
        if call.span is None:
            continue
        outer = next((k for k in extractor.tree.ancestors(call.span) if k in by_span), None)
        if (
            outer is not None
            and by_span[outer].name == call.name
            and (call.mcp or by_span[outer].mcp)
        ):
            into[call.span] = outer
    members: dict[SpanKey, list[tuple[int, _Call]]] = {}
    for key in into:
        root, depth, seen = key, 0, {key}
        while root in into and into[root] not in seen:
            root, depth = into[root], depth + 1
            seen.add(root)
        members.setdefault(root, []).append((depth, by_span[key]))
    for root_key, inner in members.items():
        call = by_span[root_key]
        group = [call] + [c for _, c in sorted(inner, key=lambda item: item[0])]
        for other in group[1:]:
            report.merged_duplicates += 1
            if call.arguments is None or (call.weak_arguments and other.arguments is not None):
                call.arguments, call.weak_arguments = other.arguments, other.weak_arguments
            if call.result is None:
                call.result = other.result
            call.call_id = call.call_id or other.call_id
            call.error = call.error or other.error
            call.mcp = True
        call.server = _server_of([spans[c.span] for c in group if c.span is not None])
    extractor.executed = [c for c in extractor.executed if c.span not in into]
    for call in extractor.executed:
        if call.mcp and call.span is not None and call.span not in members:
            call.server = _server_of([spans[call.span]])


def _merge(extractor: _Extractor, report: ImportReport, window_ns: int) -> list[_Call]:
    """Dedupe: each executed call absorbs at most one LLM-reported call (see trace-formats.md)."""
    unmatched = _dedupe_requested(extractor, report)
    executed_ids: set[str] = set()
    for executed in extractor.executed:
        if executed.call_id and executed.call_id in executed_ids:
            report.id_collisions += 1
        executed_ids.add(executed.call_id)
        match = None
        if executed.call_id:
            match = next(
                (
                    r
                    for r in unmatched
                    if r.call_id == executed.call_id
                    and r.name == executed.name
                    and _same_arguments(r.arguments, executed.arguments)
                ),
                None,
            )
        if match is None:
            candidates = [
                r
                for r in unmatched
                if r.name == executed.name
                and not (executed.call_id and r.call_id)
                and r.time <= executed.start + _SKEW_NS
                and executed.start - r.time <= window_ns
                and _same_arguments(r.arguments, executed.arguments)
            ]
            match = min(candidates, key=lambda r: (r.time, r.order, r.sub), default=None)
        if match is None:
            continue
        unmatched.remove(match)
        report.merged_duplicates += 1
        if executed.arguments is None or (executed.weak_arguments and match.arguments):
            executed.arguments = match.arguments
        if not executed.call_id:
            executed.call_id = match.call_id
    calls = extractor.executed + unmatched
    calls.sort(key=lambda c: (c.time, c.order, c.sub))
    _pair_results(calls, extractor.results)
    return calls


def _pair_results(calls: list[_Call], results: dict[str, dict[str, list[str]]]) -> None:
    """The k-th call (in time order) with an id takes the k-th result of that id."""
    seen: dict[str, int] = {}
    for call in calls:
        if not call.call_id or call.call_id not in results:
            continue
        k = seen.get(call.call_id, 0)
        seen[call.call_id] = k + 1
        history = max(results[call.call_id].values(), key=len)
        if call.result is None and k < len(history):
            call.result = history[k]


def _renumbered(group: _Group) -> None:
    """Orders 0.. within the group, keeping their relative order: what a group maps to must
    not depend on the spans of other traces that came before it (in a file, or live)."""
    spans = sorted(group.spans, key=lambda s: s.order)
    group.spans = [dataclasses.replace(s, order=i) for i, s in enumerate(spans)]
    events = sorted(group.events, key=lambda e: e.order)
    group.events = [dataclasses.replace(e, order=i) for i, e in enumerate(events)]


def _trace(group: _Group, report: ImportReport, window_ns: int) -> trace_pb2.Trace:
    _renumbered(group)
    extractor = _Extractor(report, f"trace {group.key}", group.spans)
    group.spans.sort(key=lambda s: (s.start, s.order))
    for span in group.spans:
        extractor.span(span)
    spans = {span.key: span for span in group.spans}
    order_of_span = {span.span_id: span.order for span in group.spans}
    for event in sorted(group.events, key=lambda e: (e.time, e.order)):
        extractor.event(
            event,
            order_of_span.get(event.span_id, len(order_of_span) + event.order),
            spans.get((event.trace_id, event.span_id)),
        )
    _merge_mcp(extractor, spans, report)
    calls = _merge(extractor, report, window_ns)
    turns = _turns(extractor, spans)
    answers = sorted(extractor.answers, key=lambda a: (a[0], a[1]))
    trace = trace_pb2.Trace(id=group.key, final_answer=answers[-1][2] if answers else "")
    tree = extractor.tree
    for call in calls:
        out = trace.calls.add(name=call.name, error=call.error, id=call.call_id)
        if call.arguments is not None:
            out.arguments_json = call.arguments
        if call.result is not None:
            out.result = call.result
        out.start_time_unix_nano = call.start
        out.end_time_unix_nano = call.end
        out.turn = turns.turn_at(*call.anchor)
        out.agent = tree.agent(call.span) if call.span is not None else ""
        out.server = call.server
    _add_model_calls(trace, extractor, turns)
    _add_turns(trace, extractor, turns, spans, answers)
    trace.metadata["otel.trace_id"] = ",".join(group.trace_ids)
    report.traces += 1
    report.calls += len(trace.calls)
    report.model_calls += len(trace.model_calls)
    return trace


def _add_model_calls(trace: trace_pb2.Trace, extractor: _Extractor, turns: TurnTimeline) -> None:
    """One ModelCall per LLM span (not the spans above others, whose usage is a sum)."""
    for span in extractor.model_spans:
        usage = otlp_usage.read_usage(span.attrs)
        for key, why in usage.problems:
            extractor.unmapped(span, key, why)
        if not usage.recorded:
            extractor.report.add(
                MODEL_CALL_WITHOUT_USAGE,
                f"{extractor.where} span {span.span_id}",
                f"{span.name}: counted with 0 tokens",
            )
        model_call = trace.model_calls.add(
            model=usage.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            turn=turns.turn_at(span.start, span.order),
            agent=extractor.tree.agent(span.key),
            start_time_unix_nano=span.start,
            end_time_unix_nano=span.end,
        )
        if usage.cost is not None:
            model_call.cost = usage.cost


def _add_turns(
    trace: trace_pb2.Trace,
    extractor: _Extractor,
    turns: TurnTimeline,
    spans: dict[SpanKey, _Span],
    answers: list[tuple[int, int, str, SpanKey | None]],
) -> None:
    """`turns[k-1]`: turn k's user message, and the root agent's last text in the turn (a
    sub-agent answers its caller, not the user). `answers` are in time order."""
    said: dict[int, str] = {}
    for time, order, text, answered_in in answers:
        if answered_in is None:
            said[turns.turn_at(time, order)] = text
        elif extractor.tree.agent(answered_in) == "":
            said[turns.turn_at(*spans[answered_in].anchor)] = text
    for number in range(1, turns.count + 1):
        trace.turns.add(
            user_input=turns.user_inputs.get(number, ""), final_answer=said.get(number, "")
        )


def _turns(extractor: _Extractor, spans: dict[SpanKey, _Span]) -> TurnTimeline:
    """User turns from the root agent's model inputs (a sub-agent's input is its task)."""
    timeline = TurnTimeline()
    for key, texts in extractor.user_texts.items():
        span = spans.get(key)
        if span is not None and extractor.tree.agent(key) == "":
            timeline.model_input(span.start, span.order, texts)
    timeline.freeze()
    return timeline
