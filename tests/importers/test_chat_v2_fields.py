"""OpenAI and Anthropic importers, SPEC v2 fields: `usage` gives model calls, user messages
give turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_openai
import trajgrade
from openai import OpenAI
from trajgrade import importers
from trajgrade.importers import ImportReport, anthropic, openai
from trajgrade.v1 import assertion_pb2, result_pb2, suite_pb2, trace_pb2


def _sdk_conversation() -> list[dict[str, Any]]:
    """Two user turns against the fake server with the OpenAI SDK, logged as agents log them:
    each assistant message with its response's `usage` and `model` (the SDK's own dumps)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a concierge."}]
    with fake_openai.serve() as base_url:
        client = OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        for user_message in fake_openai.USER_TURNS:
            messages.append({"role": "user", "content": user_message})
            for _ in range(3):
                response = client.chat.completions.create(
                    model=fake_openai.CONCIERGE_MODEL, messages=messages
                )
                message = response.choices[0].message
                assert response.usage is not None
                messages.append(
                    {
                        **message.model_dump(exclude_none=True),
                        "usage": response.usage.model_dump(exclude_none=True),
                        "model": response.model,
                    }
                )
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": f"{call.id} ok"}
                    )
    return messages


def test_openai_sdk_conversation_gives_turns_and_model_calls(tmp_path: Path) -> None:
    messages = _sdk_conversation()
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"id": "run-1", "messages": messages}) + "\n")
    report = ImportReport()
    [trace] = importers.read(path, report=report)
    assert not report.unmapped, report.summary()
    assert [(c.name, c.turn) for c in trace.calls] == [
        ("get_weather", 1),
        ("get_time", 1),
        ("booking_agent", 2),
    ]
    # The prompt grows with the conversation: 2 and 5 messages in turn 1, 7 and 9 in turn 2.
    expected = [fake_openai.concierge_usage(n) for n in (2, 5, 7, 9)]
    assert [(m.model, m.input_tokens, m.output_tokens, m.turn) for m in trace.model_calls] == [
        (fake_openai.CONCIERGE_MODEL, u["prompt_tokens"], u["completion_tokens"], turn)
        for u, turn in zip(expected, (1, 1, 2, 2), strict=True)
    ]
    assert all(not m.HasField("cost") and m.agent == "" for m in trace.model_calls)
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        (fake_openai.USER_TURNS[0], fake_openai.FINAL_ANSWER),
        (fake_openai.USER_TURNS[1], fake_openai.SECOND_ANSWER),
    ]
    assert trace.final_answer == fake_openai.SECOND_ANSWER
    assert report.model_calls == 4


def test_openai_sdk_conversation_grades_a_token_ceiling(tmp_path: Path) -> None:
    # Graded through an expression over the imported usage (SPEC §14).
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"id": "run-1", "messages": _sdk_conversation()}) + "\n")
    [trace] = importers.read(path)
    expected = [fake_openai.concierge_usage(n) for n in (2, 5, 7, 9)]
    total = sum(u["prompt_tokens"] + u["completion_tokens"] for u in expected)
    suite = suite_pb2.Suite(
        assertions=[
            assertion_pb2.Assertion(
                name=name, expression=assertion_pb2.Expression(expr=f"usage.total_tokens <= {n}")
            )
            for name, n in (("at ceiling", total), ("below", total - 1))
        ]
    )
    result = trajgrade.compile_suite(suite).grade(trace)
    assert [(r.name, r.status == result_pb2.ASSERTION_STATUS_PASS) for r in result.results] == [
        ("at ceiling", True),
        ("below", False),
    ]


def test_chat_completion_response_objects_each_give_a_model_call(tmp_path: Path) -> None:
    with fake_openai.serve() as base_url:
        client = OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        response = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}]
        )
    path = tmp_path / "responses.jsonl"
    path.write_text(json.dumps(response.model_dump()) + "\n")
    report = ImportReport()
    [trace] = importers.read(path, report=report)
    assert [c.name for c in trace.calls] == ["get_weather", "get_time"]
    [model_call] = trace.model_calls
    usage = fake_openai._usage()
    assert (model_call.model, model_call.input_tokens, model_call.output_tokens) == (
        "gpt-4o-mini",
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    # A response alone holds no user message: turns are not recorded.
    assert (model_call.turn, [c.turn for c in trace.calls], list(trace.turns)) == (0, [0, 0], [])
    assert not report.unmapped, report.summary()


def test_responses_api_object_usage_and_turns() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5-mini",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Refund order 7"}]},
            {"type": "function_call", "call_id": "fc1", "name": "get_order", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "fc1", "output": "charged twice"},
            {"role": "user", "content": "Go ahead."},
        ],
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "fc2", "name": "refund", "arguments": "{}"},
        ],
        # Responses usage: input_tokens include the cached ones.
        "usage": {
            "input_tokens": 300,
            "input_tokens_details": {"cached_tokens": 200},
            "output_tokens": 25,
            "output_tokens_details": {"reasoning_tokens": 10},
            "total_tokens": 325,
        },
    }
    report = ImportReport()
    [(where, _, _, items)] = openai.iter_conversations(response, "r", report)
    trace = openai.from_items(items, report=report, where=where)
    assert [(c.name, c.turn) for c in trace.calls] == [("get_order", 1), ("refund", 2)]
    [model_call] = trace.model_calls
    assert (model_call.model, model_call.input_tokens, model_call.output_tokens) == (
        "gpt-5-mini",
        300,
        25,
    )
    assert model_call.turn == 2
    assert [t.user_input for t in trace.turns] == ["Refund order 7", "Go ahead."]
    assert not report.unmapped, report.summary()


def test_gateway_cost_and_invalid_usage_are_reported() -> None:
    report = ImportReport()
    trace = openai.from_items(
        [
            {"role": "user", "content": "hi"},
            # OpenRouter adds the call's cost to usage.
            {
                "role": "assistant",
                "content": "hello",
                "model": "openrouter/x",
                "usage": {"prompt_tokens": 9, "completion_tokens": 2, "cost": 0.0012},
            },
            {"role": "assistant", "content": "again", "usage": {"prompt_tokens": -1}},
            {"role": "assistant", "content": "more", "usage": "lots"},
        ],
        report=report,
    )
    [model_call] = trace.model_calls
    assert (model_call.input_tokens, model_call.output_tokens, model_call.cost) == (9, 2, 0.0012)
    assert report.unmapped == {"INVALID_USAGE": 2}
    assert any("prompt_tokens/input_tokens: -1" in e for e in report.examples["INVALID_USAGE"])
    assert trace.turns[0].final_answer == "more"


def test_anthropic_usage_counts_cache_tokens_and_tool_results_continue_a_turn(
    tmp_path: Path,
) -> None:
    # A logged request/response pair per model call, as the Messages API returns them.
    record = {
        "id": "claude-run",
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "user", "content": "Refund order 7"},
            {
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": "t1", "name": "get_order", "input": {}}],
                "usage": {
                    "input_tokens": 20,
                    "cache_creation_input_tokens": 5,
                    "cache_read_input_tokens": 100,
                    "output_tokens": 12,
                },
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "charged 2x"}],
            },
            {"role": "user", "content": [{"type": "text", "text": "Yes, refund one."}]},
        ],
        "response": {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "tool_use", "id": "t2", "name": "refund", "input": {"n": 1}},
                {"type": "text", "text": "Refunded."},
            ],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 40,
                "cache_creation_input_tokens": None,
                "cache_read_input_tokens": 125,
                "output_tokens": 30,
            },
        },
    }
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(record))
    report = ImportReport()
    [trace] = importers.read(path, report=report)
    assert importers.detect_format(path) == "anthropic"
    assert [(c.name, c.turn) for c in trace.calls] == [("get_order", 1), ("refund", 2)]
    assert [(m.model, m.input_tokens, m.output_tokens, m.turn) for m in trace.model_calls] == [
        ("claude-sonnet-4-5", 125, 12, 1),
        ("claude-sonnet-4-5", 165, 30, 2),
    ]
    assert [(t.user_input, t.final_answer) for t in trace.turns] == [
        ("Refund order 7", ""),
        ("Yes, refund one.", "Refunded."),
    ]
    assert not report.unmapped, report.summary()


def test_anthropic_messages_without_user_text_record_no_turns() -> None:
    trace = anthropic.from_messages(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]},
        ]
    )
    assert trace.calls[0].turn == 0
    assert list(trace.turns) == []
    assert trace_pb2.Trace().turns == trace.turns


def test_hosted_mcp_calls_name_their_server() -> None:
    responses = openai.from_items(
        [
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "server_label": "deepwiki",
                "name": "ask_question",
                "arguments": '{"q": "x"}',
                "output": "answer",
            }
        ]
    )
    assert [(c.name, c.server, c.result) for c in responses.calls] == [
        ("ask_question", "deepwiki", "answer")
    ]
    claude = anthropic.from_messages(
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "mcp_tool_use",
                        "id": "m1",
                        "name": "echo",
                        "server_name": "example-mcp",
                        "input": {"text": "hi"},
                    }
                ],
            }
        ]
    )
    assert [(c.name, c.server) for c in claude.calls] == [("echo", "example-mcp")]
