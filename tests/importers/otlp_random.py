"""Random OTLP span sets over the conventions the mapping reads (seeded, reproducible)."""

from __future__ import annotations

import json
import random

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TOOLS = ["lookup", "notify", "get_weather", ""]
IDS = ["", "call_1", "call_2", "c3"]
ARGS = ['{"q": 1}', '{"q":1.0}', '{"q": 2}', "{not json", '{"a": NaN}', '{"n": 1e400}', "[]"]
MODEL_VALUES: list[object] = [12, 3.0, "7", " 8 ", -1, "x", 2.5, True, float("nan")]
AGENTS = ["triage", "billing", ""]


def any_value(rng: random.Random, value: object) -> AnyValue:  # noqa: PLR0911 - one per type
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(any_value(rng, v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(
            KeyValue(key=k, value=any_value(rng, v)) for k, v in value.items()
        )
        return out
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if value is None:
        return AnyValue()
    return AnyValue(string_value=str(value))


def _messages(rng: random.Random, output: bool) -> str:
    messages = []
    for _ in range(rng.randint(0, 3)):
        parts: list[object] = []
        for _ in range(rng.randint(0, 3)):
            kind = rng.choice(["tool_call", "text", "tool_call_response", "other"])
            if kind == "tool_call":
                part: dict[str, object] = {"type": kind, "name": rng.choice(TOOLS)}
                if rng.random() < 0.7:
                    part["id"] = rng.choice(IDS)
                if rng.random() < 0.8:
                    part["arguments"] = rng.choice(
                        [{"q": 1}, {"q": 1.5, "n": 12345678901234567890}, '{"q": 1}', None]
                    )
                parts.append(part)
            elif kind == "text":
                parts.append({"type": "text", "content": rng.choice(["hi", "done", "", 3])})
            elif kind == "tool_call_response":
                parts.append(
                    {"type": kind, "id": rng.choice(IDS), "response": rng.choice(["ok", {"t": 1}])}
                )
            else:
                parts.append(rng.choice(["junk", {"type": "image"}]))
        role = rng.choice(["assistant"] if output else ["user", "user", "assistant", "tool"])
        messages.append({"role": role, "parts": parts})
    text = json.dumps(messages)
    return text if rng.random() < 0.9 else text[: rng.randint(0, len(text))]


def _maybe(
    rng: random.Random, attrs: dict[str, object], p: float, key: str, choices: list[object]
) -> None:
    if rng.random() < p:
        attrs[key] = rng.choice(choices)


def _genai_tool(rng: random.Random, attrs: dict[str, object]) -> None:
    attrs["gen_ai.operation.name"] = "execute_tool"
    _maybe(rng, attrs, 0.9, "gen_ai.tool.name", TOOLS)
    _maybe(rng, attrs, 0.6, "gen_ai.tool.call.id", IDS)
    _maybe(rng, attrs, 0.7, "gen_ai.tool.call.arguments", [*ARGS, {"q": 1}])
    _maybe(rng, attrs, 0.5, "gen_ai.tool.call.result", ["ok", 42, 1.5, [1, "a"]])
    if rng.random() < 0.2:
        attrs["error.type"] = "boom"
    if rng.random() < 0.3:
        attrs["tool.extra"] = "x"


def _oi_tool(rng: random.Random, attrs: dict[str, object]) -> None:
    attrs["openinference.span.kind"] = "TOOL"
    attrs[rng.choice(["tool.name", "tool_call.function.name"])] = rng.choice(TOOLS)
    if rng.random() < 0.5:
        attrs["tool_call.function.arguments"] = rng.choice(ARGS)
    else:
        attrs["input.mime_type"] = "application/json"
        attrs["input.value"] = rng.choice(ARGS)
    _maybe(rng, attrs, 0.5, "tool_call.id", IDS)
    attrs["output.value"] = rng.choice(["out", 7])


def _plain(rng: random.Random, attrs: dict[str, object]) -> None:
    attrs["tool.name"] = rng.choice(TOOLS)
    _maybe(rng, attrs, 0.5, "tool.arguments", ARGS)
    for key in ("tool.result", "tool.output", "tool.call.id"):
        if rng.random() < 0.4:
            attrs[key] = rng.choice(["r", "call_1", 3])


def _llm(rng: random.Random, kind: str, attrs: dict[str, object]) -> None:
    if kind == "llm":
        attrs["gen_ai.operation.name"] = rng.choice(["chat", "text_completion", "other"])
        if rng.random() < 0.7:
            attrs["gen_ai.output.messages"] = _messages(rng, True)
        if rng.random() < 0.7:
            attrs["gen_ai.input.messages"] = _messages(rng, False)
        keys = [
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.total_tokens",
            "gen_ai.usage.cost",
            "gen_ai.usage.other",
            "gen_ai.response.model",
            "gen_ai.request.model",
        ]
    else:
        attrs["openinference.span.kind"] = "LLM"
        for i in range(rng.randint(0, 3)):
            base = f"llm.output_messages.{i}.message"
            attrs[f"{base}.role"] = rng.choice(["assistant", "user"])
            attrs[f"{base}.content"] = rng.choice(["answer", "", 5])
            for j in range(rng.randint(0, 2)):
                call = f"{base}.tool_calls.{j}.tool_call"
                attrs[f"{call}.function.name"] = rng.choice(TOOLS)
                attrs[f"{call}.id"] = rng.choice(IDS)
                attrs[f"{call}.function.arguments"] = rng.choice(ARGS)
        for i in range(rng.randint(0, 4)):
            base = f"llm.input_messages.{i}.message"
            attrs[f"{base}.role"] = rng.choice(["user", "tool", "assistant"])
            attrs[f"{base}.content"] = rng.choice(["q1", "q2", {"x": 1}])
            if rng.random() < 0.5:
                attrs[f"{base}.tool_call_id"] = rng.choice(IDS)
        keys = [
            "llm.token_count.prompt",
            "llm.token_count.completion",
            "llm.token_count.total",
            "llm.cost.total",
            "llm.model_name",
        ]
    for key in keys:
        if rng.random() < 0.5:
            attrs[key] = rng.choice([*MODEL_VALUES, "gpt"])


def _agent(rng: random.Random, attrs: dict[str, object]) -> None:
    if rng.random() < 0.5:
        attrs["gen_ai.operation.name"] = "invoke_agent"
        if rng.random() < 0.7:
            attrs["gen_ai.agent.name"] = rng.choice(AGENTS)
    else:
        attrs["openinference.span.kind"] = "AGENT"
        if rng.random() < 0.7:
            attrs["agent.name"] = rng.choice(AGENTS)


def _mcp(rng: random.Random, attrs: dict[str, object]) -> None:
    attrs["mcp.method.name"] = "tools/call"
    if rng.random() < 0.5:
        attrs["gen_ai.tool.name"] = rng.choice(TOOLS)
    elif rng.random() < 0.5:
        attrs["mcp.tool.name"] = rng.choice(TOOLS)
    if rng.random() < 0.4:
        attrs["mcp.server.name"] = "weather"
    if rng.random() < 0.4:
        attrs["server.address"] = "localhost"
        if rng.random() < 0.5:
            attrs["server.port"] = rng.choice([8080, "80", True])
    _maybe(rng, attrs, 0.5, "gen_ai.tool.call.arguments", ARGS)


def _attrs(rng: random.Random) -> dict[str, object]:
    attrs: dict[str, object] = {}
    kind = rng.choice(["genai_tool", "oi_tool", "plain", "llm", "oi_llm", "agent", "mcp", "none"])
    if kind in ("llm", "oi_llm"):
        _llm(rng, kind, attrs)
    elif kind != "none":
        {
            "genai_tool": _genai_tool,
            "oi_tool": _oi_tool,
            "plain": _plain,
            "agent": _agent,
            "mcp": _mcp,
        }[kind](rng, attrs)
    _maybe(rng, attrs, 0.15, "session.id", ["s1", "s2", 3])
    if rng.random() < 0.1:
        attrs[rng.choice(["gen_ai.usage.input_tokens", "tool.name", "x"])] = None
    return attrs


def requests(seed: int) -> tuple[list[ExportTraceServiceRequest], list[ExportLogsServiceRequest]]:
    """Span sets of one to three traces, split over requests, with GenAI log events."""
    rng = random.Random(seed)
    trace_ids = [bytes([t + 1]) * 16 for t in range(rng.randint(1, 3))]
    spans: list[Span] = []
    count = rng.randint(1, 14)
    for i in range(count):
        trace_id = rng.choice(trace_ids)
        name = rng.choice(
            [
                "span",
                "tools/call lookup",
                "MCP handle tools/call get_weather",
                "invoke_agent triage",
                "invoke_agent",
                "chat",
            ]
        )
        start = rng.choice([0, 1_000, 2_000, 2_000_000_000, 400_000_000_000]) + rng.randint(0, 50)
        span = Span(
            trace_id=trace_id,
            span_id=(rng.randint(1, count + 1)).to_bytes(8, "big"),
            name=name,
            kind=rng.choice([0, 1, 2, 3]),
            start_time_unix_nano=start,
            end_time_unix_nano=rng.choice([0, start + rng.randint(1, 5_000)]),
            status=Status(code=rng.choice([0, 0, 2])),
        )
        if i and rng.random() < 0.8:
            span.parent_span_id = rng.randint(1, count + 1).to_bytes(8, "big")
        for key, value in _attrs(rng).items():
            span.attributes.add(key=key, value=any_value(rng, value))
        spans.append(span)
    out = []
    while spans:
        take = rng.randint(1, len(spans))
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        service = rng.choice(["agent", "weather-mcp", None])
        if service:
            resource_spans.resource.attributes.add(
                key="service.name", value=AnyValue(string_value=service)
            )
        if rng.random() < 0.2:
            resource_spans.resource.attributes.add(
                key="session.id", value=AnyValue(string_value="s1")
            )
        resource_spans.scope_spans.add().spans.extend(spans[:take])
        spans = spans[take:]
        out.append(request)
    logs = []
    if rng.random() < 0.5:
        log_request = ExportLogsServiceRequest()
        records = log_request.resource_logs.add().scope_logs.add().log_records
        for _ in range(rng.randint(1, 5)):
            record = records.add(
                event_name=rng.choice(
                    ["gen_ai.choice", "gen_ai.user.message", "gen_ai.tool.message", "other", ""]
                ),
                time_unix_nano=rng.choice([0, 1_500, 3_000]),
                observed_time_unix_nano=2_500,
                trace_id=rng.choice([*trace_ids, b"", bytes(16), b"\x09" * 16]),
                span_id=rng.randint(1, count + 1).to_bytes(8, "big"),
            )
            if not record.event_name and rng.random() < 0.5:
                record.attributes.add(
                    key="event.name", value=AnyValue(string_value="gen_ai.choice")
                )
            body = rng.choice(
                [
                    {"content": "hello"},
                    {
                        "message": {
                            "content": "answer",
                            "tool_calls": [
                                {
                                    "id": rng.choice(IDS),
                                    "function": {
                                        "name": rng.choice(TOOLS),
                                        "arguments": rng.choice(ARGS),
                                    },
                                }
                            ],
                        }
                    },
                    {"id": rng.choice(IDS), "content": rng.choice(["res", {"r": 1}, None])},
                    "text",
                ]
            )
            record.body.CopyFrom(any_value(rng, body))
        logs.append(log_request)
    return out, logs
