"""OTLP importer, SPEC v2 fields: turns, agent paths, MCP servers, model calls.

The concierge run (tests/importers/concierge_driver.py) is real instrumentation output: two
user turns, a sub-agent used as a tool, a stdio MCP server traced by the MCP SDK on both sides.
"""

from __future__ import annotations

import json
from pathlib import Path

import fake_openai
import pytest
import trajgrade
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from test_import_otlp import _kv, _read, _span, _write
from trajgrade.importers import ImportReport
from trajgrade.v1 import assertion_pb2, result_pb2, suite_pb2, trace_pb2

GROUP = "gen_ai.conversation.id"
# Messages the model saw in each LLM call, in order: the concierge's four (turn 1: system +
# user, then + the assistant's calls and two results; turn 2: + answer + user, then + call and
# result) and the booking sub-agent's two (its own system + task, then + call and result).
PROMPT_MESSAGES = [2, 5, 7, 2, 4, 9]
AGENTS = ["", "", "", "booking", "booking", ""]
TURNS = [1, 1, 2, 2, 2, 2]


def _concierge(paths: tuple[Path, ...], **options: object) -> tuple[trace_pb2.Trace, ImportReport]:
    report = ImportReport()
    [trace] = trajgrade.importers.read(list(paths), report=report, group_by=GROUP, **options)
    return trace, report


def test_concierge_run_fills_turns_agents_servers_and_model_calls(
    concierge: tuple[Path, Path],
) -> None:
    trace, report = _concierge(concierge)
    assert trace.id == "conv-concierge-1"
    assert len(trace.metadata["otel.trace_id"].split(",")) == 2  # one OTLP trace per turn
    assert [(c.name, c.turn, c.agent, c.server, c.error) for c in trace.calls] == [
        ("get_weather", 1, "", "weather-mcp", False),
        ("get_time", 1, "", "", True),
        ("booking_agent", 2, "", "", False),
        ("book_table", 2, "booking", "", False),
    ]
    weather, _, booking, book = trace.calls
    # The MCP call is one call: the agent's tool span with the model's argument text, merged
    # with the SDK's client span and the server's span (another process, another file).
    assert weather.arguments_json == fake_openai.WEATHER_ARGS
    assert json.loads(weather.result) == {"temp_c": 21.5, "city": "Paris"}
    assert weather.id == "call_weather_1"
    assert book.arguments_json == fake_openai.BOOKING_ARGS
    assert booking.result == fake_openai.BOOKED
    for call in trace.calls:
        assert 0 < call.start_time_unix_nano <= call.end_time_unix_nano
    # The sub-agent ran inside the agent tool's span.
    assert booking.start_time_unix_nano <= book.start_time_unix_nano
    assert book.end_time_unix_nano <= booking.end_time_unix_nano

    usage = [fake_openai.concierge_usage(n) for n in PROMPT_MESSAGES]
    assert [
        (m.model, m.input_tokens, m.output_tokens, m.agent, m.turn) for m in trace.model_calls
    ] == [
        (fake_openai.CONCIERGE_MODEL, u["prompt_tokens"], u["completion_tokens"], agent, turn)
        for u, agent, turn in zip(usage, AGENTS, TURNS, strict=True)
    ]
    assert not any(m.HasField("cost") for m in trace.model_calls)  # nothing records a cost
    for model_call in trace.model_calls:
        assert 0 < model_call.start_time_unix_nano <= model_call.end_time_unix_nano

    # Each user message starts a turn; the sub-agent's task is not one, and its answer
    # ("Booked table 12.") is not the turn's answer.
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        (fake_openai.USER_TURNS[0], fake_openai.FINAL_ANSWER),
        (fake_openai.USER_TURNS[1], fake_openai.SECOND_ANSWER),
    ]
    assert trace.final_answer == fake_openai.SECOND_ANSWER
    # Two inner MCP spans of get_weather, and each of the four calls the model asked for.
    assert report.merged_duplicates == 2 + 4
    assert not report.unmapped, report.summary()
    assert "4 tool call(s) and 6 model call(s)" in report.summary()


def test_concierge_run_grades_with_expressions_over_the_new_fields(
    concierge: tuple[Path, Path],
) -> None:
    # The core grades v2 fields in expressions already (SPEC §14): the imported values are what
    # a suite sees.
    trace, _ = _concierge(concierge)
    total = sum(
        u["prompt_tokens"] + u["completion_tokens"]
        for u in map(fake_openai.concierge_usage, PROMPT_MESSAGES)
    )
    suite = suite_pb2.Suite(
        assertions=[
            assertion_pb2.Assertion(name=name, expression=assertion_pb2.Expression(expr=expr))
            for name, expr in [
                ("ceiling", f"usage.total_tokens <= {total}"),
                ("below", f"usage.total_tokens <= {total - 1}"),
                (
                    "mcp weather",
                    'calls.exists(c, c.name == "get_weather" && c.server == "weather-mcp")',
                ),
                (
                    "booking sub-agent",
                    'calls.all(c, c.name != "book_table" || c.agent == "booking")',
                ),
                (
                    "booking in turn 2",
                    'calls.exists(c, c.name == "book_table" && c.turn == 2)',
                ),
                (
                    "sub-agent tokens",
                    'model_calls.filter(m, m.agent == "booking").size() == 2',
                ),
            ]
        ]
    )
    result = trajgrade.compile_suite(suite).grade(trace)
    assert {r.name: r.status == result_pb2.ASSERTION_STATUS_PASS for r in result.results} == {
        "ceiling": True,
        "below": False,
        "mcp weather": True,
        "booking sub-agent": True,
        "booking in turn 2": True,
        "sub-agent tokens": True,
    }


def test_without_the_server_file_the_mcp_call_has_no_server(concierge: tuple[Path, Path]) -> None:
    # stdio MCP: the client side names no server (no `server.address`, and the conventions have
    # no server-name attribute); the wrapper and the client span are still one call.
    agent_file, _ = concierge
    trace, report = _concierge((agent_file,))
    weather = trace.calls[0]
    assert (weather.name, weather.server) == ("get_weather", "")
    assert [c.name for c in trace.calls] == [
        "get_weather",
        "get_time",
        "booking_agent",
        "book_table",
    ]
    assert report.merged_duplicates == 1 + 4


def test_turns_come_from_the_conversation_not_from_the_trace_split(
    concierge: tuple[Path, Path],
) -> None:
    # Without grouping each turn's OTLP trace is its own Trace; the second still knows it is
    # turn 2, since its model inputs hold two user messages.
    report = ImportReport()
    first, second = trajgrade.importers.read(list(concierge), report=report)
    assert {c.turn for c in first.calls} == {1}
    assert {c.turn for c in second.calls} == {2}
    assert [t.user_input for t in second.turns] == list(fake_openai.USER_TURNS)
    assert second.turns[0].final_answer == ""  # turn 1's answer is in the other trace


def _mcp_span(
    span: int,
    parent: int,
    start: int,
    attrs: dict[str, object],
    *,
    kind: int,
    name: str,
    method: str = "tools/call",
) -> Span:
    out = _span(1, span, start, {"mcp.method.name": method, **attrs})
    out.parent_span_id = parent.to_bytes(8, "big")
    out.kind = kind
    out.name = name
    return out


def test_mcp_client_and_server_spans_are_one_call_with_the_named_server(tmp_path: Path) -> None:
    client = Span.SPAN_KIND_CLIENT
    server = Span.SPAN_KIND_SERVER
    spans = [
        # MCP client span named by the conventions, with the opt-in arguments, and the server's
        # span under it (same tool): one call, server from `mcp.server.name`.
        _mcp_span(
            1,
            0,
            100,
            {
                "gen_ai.tool.name": "search",
                "gen_ai.tool.call.arguments": '{"q": "x"}',
                "server.address": "search.internal",
                "server.port": 8443,
            },
            kind=client,
            name="tools/call search",
        ),
        _mcp_span(
            2,
            1,
            101,
            {"gen_ai.tool.call.result": "[]", "mcp.server.name": "search-mcp"},
            kind=server,
            name="tools/call search",
        ),
        # A client span alone: the tool from the span name, the server from its address.
        _mcp_span(
            3,
            0,
            200,
            {"server.address": "files.internal"},
            kind=client,
            name="MCP send tools/call read",
        ),
        # Not a tool call: no call.
        _mcp_span(4, 0, 300, {}, kind=client, name="tools/list", method="tools/list"),
    ]
    [trace], report = _read(_write(tmp_path, spans))
    search, read = trace.calls
    assert (search.name, search.server, search.arguments_json, search.result) == (
        "search",
        "search-mcp",
        '{"q": "x"}',
        "[]",
    )
    assert (read.name, read.server) == ("read", "files.internal")
    assert not read.HasField("arguments_json")
    assert report.merged_duplicates == 1
    assert not report.unmapped, report.summary()


def test_mcp_server_address_with_port(tmp_path: Path) -> None:
    span = _mcp_span(
        1,
        0,
        100,
        {"gen_ai.tool.name": "f", "server.address": "mcp.example", "server.port": 9000},
        kind=Span.SPAN_KIND_CLIENT,
        name="tools/call f",
    )
    [trace], _ = _read(_write(tmp_path, [span]))
    assert trace.calls[0].server == "mcp.example:9000"


def _child(span: Span, parent: int) -> Span:
    span.parent_span_id = parent.to_bytes(8, "big")
    return span


def test_nested_agents_give_a_path_and_usage_is_counted_once(tmp_path: Path) -> None:
    agent = {"gen_ai.operation.name": "invoke_agent"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    spans = [
        # Root agent with aggregated usage of everything under it: not counted again.
        _span(1, 1, 100, {**agent, "gen_ai.agent.name": "root", "gen_ai.usage.input_tokens": 999}),
        _child(
            _span(
                1,
                2,
                110,
                {**chat, "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 1},
            ),
            1,
        ),
        _child(_span(1, 3, 120, {**agent, "gen_ai.agent.name": "triage"}), 1),
        # Two spans of one agent (invocation and run) count once in the path.
        _child(_span(1, 4, 130, {**agent, "gen_ai.agent.name": "triage"}), 3),
        _child(_span(1, 5, 140, {**agent, "gen_ai.agent.name": "billing"}), 4),
        # The article's shape: usage on a span of no known operation, as doubles (JavaScript).
        _child(
            _span(1, 6, 150, {"gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 2}), 5
        ),
        _child(_span(1, 7, 160, {"tool.name": "refund", "tool.arguments": "{}"}), 5),
        _child(_span(1, 8, 170, {"tool.name": "route", "tool.arguments": "{}"}), 3),
        # An LLM span without usage: a model call of 0 tokens, reported.
        _child(_span(1, 9, 180, chat), 3),
    ]
    spans[5].attributes[0].value.double_value = 30.0
    [trace], report = _read(_write(tmp_path, spans))
    assert [(c.name, c.agent) for c in trace.calls] == [
        ("refund", "triage/billing"),
        ("route", "triage"),
    ]
    assert [(m.agent, m.input_tokens, m.output_tokens) for m in trace.model_calls] == [
        ("", 10, 1),
        ("triage/billing", 30, 2),
        ("triage", 0, 0),
    ]
    assert report.unmapped == {"UNMAPPED_ATTRIBUTE": 1, "MODEL_CALL_WITHOUT_USAGE": 1}
    assert "usage of a span with model calls below it" in report.examples["UNMAPPED_ATTRIBUTE"][0]


def test_openinference_costs_and_bad_counts(tmp_path: Path) -> None:
    spans = [
        _span(
            1,
            1,
            100,
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-x",
                "llm.token_count.prompt": 5,
                "llm.token_count.completion": 6,
                "llm.token_count.total": 11,
                "llm.cost.total": "0.25",
            },
        ),
        _span(1, 2, 200, {"gen_ai.usage.input_tokens": -4, "gen_ai.usage.output_tokens": "7"}),
        _span(1, 3, 300, {"gen_ai.usage.total_tokens": 9}),
    ]
    spans[0].attributes[-1].value.Clear()
    spans[0].attributes[-1].value.double_value = 0.25
    [trace], report = _read(_write(tmp_path, spans))
    first, second, third = trace.model_calls
    assert (first.model, first.input_tokens, first.output_tokens, first.cost) == (
        "gpt-x",
        5,
        6,
        0.25,
    )
    assert (second.input_tokens, second.output_tokens) == (0, 7)
    assert not second.HasField("cost")
    assert (third.input_tokens, third.output_tokens) == (0, 0)
    examples = report.examples["UNMAPPED_ATTRIBUTE"]
    assert any("gen_ai.usage.input_tokens: not a token count: -4" in e for e in examples)
    assert any(
        "gen_ai.usage.total_tokens: a total without the input/output split" in e for e in examples
    )
    assert report.unmapped == {"UNMAPPED_ATTRIBUTE": 2, "MODEL_CALL_WITHOUT_USAGE": 1}


def test_user_messages_in_openinference_inputs_start_turns(tmp_path: Path) -> None:
    def llm(span: int, start: int, users: list[str], answer: str) -> Span:
        attrs: dict[str, object] = {"openinference.span.kind": "LLM"}
        for number, text in enumerate(users):
            attrs[f"llm.input_messages.{2 * number}.message.role"] = "user"
            attrs[f"llm.input_messages.{2 * number}.message.content"] = text
            attrs[f"llm.input_messages.{2 * number + 1}.message.role"] = "assistant"
            attrs[f"llm.input_messages.{2 * number + 1}.message.content"] = "..."
        attrs["llm.output_messages.0.message.role"] = "assistant"
        attrs["llm.output_messages.0.message.content"] = answer
        return _span(1, span, start, attrs)

    spans = [
        llm(1, 100, ["hi"], "hello"),
        _span(1, 2, 150, {"tool.name": "lookup", "tool.arguments": "{}"}),
        llm(3, 200, ["hi", "refund order 7"], "done"),
        _span(1, 4, 250, {"tool.name": "refund", "tool.arguments": "{}"}),
        llm(5, 300, ["hi", "refund order 7"], "refunded"),
    ]
    [trace], report = _read(_write(tmp_path, spans))
    assert [(c.name, c.turn) for c in trace.calls] == [("lookup", 1), ("refund", 2)]
    assert [m.turn for m in trace.model_calls] == [1, 2, 2]
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        ("hi", "hello"),
        ("refund order 7", "refunded"),
    ]
    # These LLM spans carry no token counts: model calls all the same, each reported.
    assert report.unmapped == {"MODEL_CALL_WITHOUT_USAGE": 3}


@pytest.mark.parametrize("value", [1.5, "12a", True])
def test_token_counts_must_be_whole_numbers(tmp_path: Path, value: object) -> None:
    span = _span(1, 1, 100, {"gen_ai.usage.output_tokens": 1})
    span.attributes.append(_kv("gen_ai.usage.input_tokens", "x"))
    if isinstance(value, float):
        span.attributes[-1].value.Clear()
        span.attributes[-1].value.double_value = value
    elif isinstance(value, bool):
        span.attributes[-1].value.Clear()
        span.attributes[-1].value.bool_value = value
    else:
        span.attributes[-1].value.string_value = value
    [trace], report = _read(_write(tmp_path, [span]))
    assert (trace.model_calls[0].input_tokens, trace.model_calls[0].output_tokens) == (0, 1)
    assert report.unmapped == {"UNMAPPED_ATTRIBUTE": 1}


def test_genai_inputs_of_any_shape_give_the_user_messages_they_have(tmp_path: Path) -> None:
    inputs = json.dumps(
        [
            1,
            "text",
            {"role": "user", "parts": [{"type": "text", "content": "hi"}, 7]},
            {"role": "assistant", "parts": "not a list"},
            # Tool results sent back as a user message (Anthropic-style) continue the turn.
            {"role": "user", "parts": [{"type": "tool_call_response", "id": "a", "response": 1}]},
            {"role": "user", "parts": [{"type": "text", "content": "and then?"}]},
        ]
    )
    span = _span(1, 1, 100, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inputs})
    [trace], _ = _read(_write(tmp_path, [span]))
    assert [t.user_input for t in trace.turns] == ["hi", "and then?"]
    assert trace.model_calls[0].turn == 2
