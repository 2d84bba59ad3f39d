"""OTLP importer on real exporter output and on crafted OTLP requests."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import fake_openai
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from trajgrade import importers
from trajgrade.cli import main
from trajgrade.importers import ImportReport, otlp
from trajgrade.v1 import trace_pb2

DATA = Path(__file__).parent / "data"


def _read(
    path: Path, logs: Path | None = None, **options: object
) -> tuple[list[trace_pb2.Trace], ImportReport]:
    report = ImportReport()
    if logs is not None:
        options["logs"] = [logs]
    traces = list(importers.read(path, report=report, **options))
    return traces, report


def _usage_mapped(
    trace: trace_pb2.Trace,
    report: ImportReport,
    llm_spans: int,
    model: str = "gpt-4o-mini",
) -> None:
    """Everything was mapped: token usage (`gen_ai.usage.{input,output}_tokens`, or
    OpenInference's prompt/completion/total) became the trace's model calls (SPEC §10)."""
    assert not report.unmapped, report.summary()
    assert "everything in the input was mapped" in report.summary()
    usage = fake_openai._usage()
    assert [(m.model, m.input_tokens, m.output_tokens) for m in trace.model_calls] == [
        (model, usage["prompt_tokens"], usage["completion_tokens"])
    ] * llm_spans
    assert not any(m.HasField("cost") for m in trace.model_calls)
    assert report.model_calls == llm_spans


def _check_weather_run(trace: trace_pb2.Trace, *, with_spans: bool) -> None:
    assert [c.name for c in trace.calls] == ["get_weather", "get_time"]
    weather, clock = trace.calls
    # The model's argument text, byte for byte: spacing, 2^53 + 1 and non-ASCII intact.
    assert weather.arguments_json == fake_openai.WEATHER_ARGS
    assert clock.arguments_json == fake_openai.TIME_ARGS
    assert [weather.id, clock.id] == ["call_weather_1", "call_time_2"]
    assert json.loads(weather.result) == {"temp_c": 21.5, "city": "Paris"}
    assert not weather.error
    assert trace.final_answer == fake_openai.FINAL_ANSWER
    if with_spans:
        assert clock.error  # the execution span ended with status ERROR
        assert weather.start_time_unix_nano > 0
        assert weather.start_time_unix_nano <= clock.start_time_unix_nano
        # Span times are the call times (SPEC §10: a duration when end >= start > 0).
        assert 0 < clock.start_time_unix_nano <= clock.end_time_unix_nano


def _check_one_turn(trace: trace_pb2.Trace) -> None:
    """The run had one user message: every call and model call is turn 1 of the root agent,
    and `turns` holds that message and the answer."""
    assert [(c.turn, c.agent, c.server) for c in trace.calls] == [(1, "", "")] * 2
    assert {(m.turn, m.agent) for m in trace.model_calls} == {(1, "")}
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        ("Weather and time in Paris?", fake_openai.FINAL_ANSWER)
    ]


@pytest.mark.parametrize("mode", ["openinference", "genai"])
def test_span_instrumentation(golden: dict[str, tuple[Path, Path | None]], mode: str) -> None:
    traces, report = _read(golden[mode][0])
    assert len(traces) == 1
    _check_weather_run(traces[0], with_spans=True)
    # Each call is in the LLM output and in its execution span: counted once.
    assert report.merged_duplicates == 2
    assert report.id_collisions == 0
    _usage_mapped(traces[0], report, llm_spans=2)
    _check_one_turn(traces[0])
    assert traces[0].calls[1].result == "Error: clock unavailable" or mode == "genai"


def test_genai_choice_events_from_logs_file(golden: dict[str, tuple[Path, Path | None]]) -> None:
    traces_path, logs_path = golden["genai-events"]
    assert logs_path is not None
    traces, report = _read(traces_path, logs_path)
    assert len(traces) == 1
    _check_weather_run(traces[0], with_spans=False)
    # No execution spans: the results come from the next request's gen_ai.tool.message events.
    assert traces[0].calls[1].result == "Error: clock unavailable"
    _usage_mapped(traces[0], report, llm_spans=2)
    # The user's message is a gen_ai.user.message event of each LLM span.
    _check_one_turn(traces[0])
    # Without the logs file the run has no tool calls at all.
    bare, _ = _read(traces_path)
    assert len(bare[0].calls) == 0


def test_committed_sample_matches_fresh_export(golden: dict[str, tuple[Path, Path | None]]) -> None:
    sample, _ = _read(DATA / "otlp-genai.traces.json")
    fresh, _ = _read(golden["genai"][0])
    assert len(sample) == 1
    _check_weather_run(sample[0], with_spans=True)
    for old, new in zip(sample[0].calls, fresh[0].calls, strict=True):
        assert (old.name, old.arguments_json, old.result, old.error) == (
            new.name,
            new.arguments_json,
            new.result,
            new.error,
        )


def _requests(path: Path) -> list[ExportTraceServiceRequest]:
    return list(otlp.load_trace_requests(path, ImportReport()))


def test_protobuf_files(golden: dict[str, tuple[Path, Path | None]], tmp_path: Path) -> None:
    requests = _requests(golden["genai"][0])
    merged = ExportTraceServiceRequest()
    for request in requests:
        merged.resource_spans.extend(request.resource_spans)
    single = tmp_path / "spans.pb"
    single.write_bytes(merged.SerializeToString())
    framed = tmp_path / "spans.bin"
    framed.write_bytes(
        b"".join(
            struct.pack(">I", len(r.SerializeToString())) + r.SerializeToString() for r in requests
        )
    )
    expected, _ = _read(golden["genai"][0])
    for path in (single, framed):
        assert importers.detect_format(path) == "otlp"
        got, report = _read(path)
        assert got == expected
        _usage_mapped(got[0], report, llm_spans=2)


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _span(
    trace: int, span: int, start: int, attrs: dict[str, object], *, error: bool = False
) -> Span:
    return Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span.to_bytes(8, "big"),
        name=f"span {span}",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        attributes=[_kv(k, v) for k, v in attrs.items()],
        status=Status(code=Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_UNSET),
    )


def _write(tmp_path: Path, spans: list[Span], *, hex_ids: bool = True) -> Path:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    document = json_format.MessageToDict(request)
    if hex_ids:
        # OTLP JSON (what the collector writes) uses hex ids; the protobuf mapping base64.
        for s, original in zip(
            document["resourceSpans"][0]["scopeSpans"][0]["spans"], spans, strict=True
        ):
            s["traceId"], s["spanId"] = original.trace_id.hex(), original.span_id.hex()
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(document) + "\n")
    return path


@pytest.mark.parametrize("hex_ids", [True, False])
def test_dedupe_without_ids_and_plain_tool_spans(tmp_path: Path, hex_ids: bool) -> None:
    output = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool_call",
                        "name": "lookup",
                        "arguments": {"q": 1.50, "n": 12345678901234567890},
                    },
                    {"type": "text", "content": "checking"},
                ],
            }
        ]
    )
    spans = [
        # LLM span reporting the call (no id), then the execution span (no id either).
        _span(1, 1, 1_000, {"gen_ai.operation.name": "chat", "gen_ai.output.messages": output}),
        _span(
            1,
            2,
            2_000,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": '{"n": 12345678901234567890, "q": 1.5}',
            },
        ),
        # A plain tool.name / tool.arguments span, failed.
        _span(
            1,
            3,
            3_000,
            {"tool.name": "notify", "tool.arguments": '{"to":"ops"}', "tool.result": "boom"},
            error=True,
        ),
        # Noise that must not become a call: a key that merely mentions a tool.
        _span(1, 4, 4_000, {"llm.tools.0.tool.json_schema": "{}", "my.tool.label": "x"}),
    ]
    traces, report = _read(_write(tmp_path, spans, hex_ids=hex_ids))
    assert len(traces) == 1
    trace = traces[0]
    assert trace.id == f"{1:032x}"
    assert [c.name for c in trace.calls] == ["lookup", "notify"]
    assert trace.calls[0].arguments_json == '{"n": 12345678901234567890, "q": 1.5}'
    assert (trace.calls[1].result, trace.calls[1].error) == ("boom", True)
    assert trace.final_answer == "checking"
    assert report.merged_duplicates == 1


def test_request_only_calls_keep_exact_numbers_and_order(tmp_path: Path) -> None:
    # Literal text: a Python float would already have rounded 0.10000000000000001 to 0.1.
    first = (
        '[{"role":"assistant","parts":['
        '{"type":"tool_call","id":"a","name":"f","arguments":{"x":0.10000000000000001}},'
        '{"type":"tool_call","id":"b","name":"g","arguments":"{\\"y\\": 1.0}"}]}]'
    )
    path = tmp_path / "raw.json"
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(
        [_span(7, 1, 100, {"gen_ai.output.messages": first})]
    )
    path.write_text(json_format.MessageToJson(request))
    traces, _ = _read(path)
    assert [(c.name, c.arguments_json) for c in traces[0].calls] == [
        ("f", '{"x":0.10000000000000001}'),
        ("g", '{"y": 1.0}'),
    ]


def test_group_by_attribute_and_missing_attribute(tmp_path: Path) -> None:
    spans = [
        _span(1, 1, 100, {"session.id": "s1", "tool.name": "a"}),
        _span(2, 2, 200, {"tool.name": "b"}),
        _span(2, 3, 150, {"session.id": "s1"}),
        _span(3, 4, 300, {"tool.name": "c"}),
    ]
    traces, report = _read(_write(tmp_path, spans), group_by="session.id")
    assert [t.id for t in traces] == ["s1"]
    assert [c.name for c in traces[0].calls] == ["a", "b"]
    assert traces[0].metadata["otel.trace_id"] == f"{1:032x},{2:032x}"
    assert report.unmapped == {"MISSING_GROUP_ATTRIBUTE": 1}


def test_unmappable_spans_are_reported(tmp_path: Path) -> None:
    spans = [
        _span(1, 1, 100, {"gen_ai.operation.name": "execute_tool"}),
        _span(1, 2, 200, {"openinference.span.kind": "TOOL"}),
        _span(1, 3, 300, {"gen_ai.output.messages": "[{not json"}),
    ]
    traces, report = _read(_write(tmp_path, spans))
    assert len(traces[0].calls) == 0
    assert report.unmapped == {"TOOL_CALL_WITHOUT_NAME": 2, "INVALID_ATTRIBUTE_JSON": 1}


def test_invalid_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    good = _write(tmp_path, [_span(1, 1, 1, {"tool.name": "a"})]).read_text()
    path.write_text(good + "{broken\n")
    traces, report = _read(path, format="otlp")
    assert len(traces) == 1
    assert report.unmapped == {"INVALID_RECORD": 1}


@pytest.mark.parametrize("mode", ["openinference", "genai", "genai-events"])
def test_a_tool_call_id_reused_across_turns_keeps_both_calls(
    reused_ids: dict[str, tuple[Path, Path | None]], mode: str
) -> None:
    # Real instrumentation output of a model that gives every call the same id (gpt-4o does
    # across turns in tau-bench runs): two calls, each with its own result, none merged away.
    traces_path, logs_path = reused_ids[mode]
    [trace], report = _read(traces_path, logs_path)
    assert [(c.name, c.id) for c in trace.calls] == [
        ("get_weather", fake_openai.REUSED_ID),
        ("get_time", fake_openai.REUSED_ID),
    ]
    assert trace.calls[0].arguments_json == fake_openai.WEATHER_ARGS
    assert trace.calls[1].arguments_json == fake_openai.TIME_ARGS
    assert json.loads(trace.calls[0].result) == {"temp_c": 21.5, "city": "Paris"}
    assert trace.calls[1].result != trace.calls[0].result
    assert report.id_collisions >= 1
    assert "reuse another call's id" in report.summary()
    _usage_mapped(trace, report, llm_spans=3, model=fake_openai.REUSE_IDS_MODEL)


def test_article_tool_spans_from_the_sdk_map_tool_output(article_spans: Path) -> None:
    # Real SDK output of the article's `tracedTool` (tests/importers/otel_driver.py `plain`):
    # tool.output is the result, the thrown tool is an error, only token usage is left over.
    [trace], report = _read(article_spans)
    weather, clock = trace.calls
    assert [weather.name, clock.name] == ["get_weather", "get_time"]
    # JSON.stringify's text: compact, non-ASCII kept, 2^53 + 1 exact.
    args = json.loads(fake_openai.WEATHER_ARGS)
    assert weather.arguments_json == json.dumps(args, separators=(",", ":"), ensure_ascii=False)
    assert '"station":9007199254740993' in weather.arguments_json
    assert json.loads(weather.result) == {"temp_c": 21.5, "city": "Paris"}
    assert not weather.error
    assert clock.error and not clock.HasField("result")
    assert report.merged_duplicates == report.id_collisions == 0
    _usage_mapped(trace, report, llm_spans=2)
    # Without message content no user message is seen: turns are not recorded.
    assert [c.turn for c in trace.calls] == [0, 0]
    assert not trace.turns


def test_article_tool_spans_map_tool_output_and_count_the_rest(tmp_path: Path) -> None:
    # The spans the promptfoo article's NestJS `tracedTool` writes: `execute_tool <name>` with
    # tool.name, tool.arguments (JSON text), tool.output; status ERROR when the tool threw.
    spans = [
        _span(
            2,
            1,
            1_000,
            {
                "tool.name": "get_invoice",
                "tool.arguments": '{"invoice_no":"INV-2026-08812"}',
                "tool.output": '{"invoice_no":"INV-2026-08812","lines":2}',
            },
        ),
        _span(
            2,
            2,
            2_000,
            {
                "tool.name": "create_credit_note_draft",
                "tool.arguments": '{"invoice_no":"INV-2026-08812"}',
                "tool.retry_count": 2,
            },
            error=True,
        ),
        _span(2, 3, 3_000, {"gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 40}),
    ]
    [trace], report = _read(_write(tmp_path, spans))
    invoice, draft = trace.calls
    assert (invoice.name, invoice.result) == (
        "get_invoice",
        '{"invoice_no":"INV-2026-08812","lines":2}',
    )
    assert draft.error and not draft.HasField("result")
    assert report.unmapped == {"UNMAPPED_ATTRIBUTE": 1}
    [example] = report.examples["UNMAPPED_ATTRIBUTE"]
    assert "tool.retry_count: not read for a plain tool span" in example
    # The span's token usage is a model call (SPEC §10), timed by its span.
    [model_call] = trace.model_calls
    assert (model_call.input_tokens, model_call.output_tokens) == (812, 40)
    assert (model_call.start_time_unix_nano, model_call.end_time_unix_nano) == (3_000, 3_010)


def test_import_cli_reads_logs_and_writes_stdout(
    golden: dict[str, tuple[Path, Path | None]], capsys: pytest.CaptureFixture[str]
) -> None:
    # `trajgrade import --format otlp TRACES --logs LOGS --out -`: the kept command line.
    traces_path, logs_path = golden["genai-events"]
    assert logs_path is not None
    argv = ["import", "--format", "otlp", str(traces_path), "--logs", str(logs_path), "--out", "-"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    [line] = captured.out.splitlines()
    trace = json_format.Parse(line, trace_pb2.Trace())
    _check_weather_run(trace, with_spans=False)
    assert "imported 1 trace(s) with 2 tool call(s)" in captured.err
    # Without the logs the calls are not in the spans: the import fails and says so.
    assert main(["import", str(traces_path), "--out", "-"]) == 1
    assert "no tool call mapped (input read as otlp)" in capsys.readouterr().err
