"""OpenAI and Anthropic importers: tau-bench runs, round trips and unmapped reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trajgrade import importers
from trajgrade.importers import ImportReport, anthropic, openai
from trajgrade.v1 import trace_pb2


def test_tau_bench_matches_raw_file(tau_bench: Path) -> None:
    raw = json.loads(tau_bench.read_text())
    report = ImportReport()
    traces = list(importers.read(tau_bench, report=report, error_prefix="Error:"))
    assert importers.detect_format(tau_bench) == "openai"
    assert len(traces) == len(raw) == 200
    assert report.total_unmapped == 0, report.summary()
    for run, trace in zip(raw, traces, strict=True):
        expected = [
            (tc["function"]["name"], tc["function"]["arguments"], tc["id"])
            for message in run["traj"]
            for tc in message.get("tool_calls") or []
        ]
        assert [(c.name, c.arguments_json, c.id) for c in trace.calls] == expected
        results = [m["content"] for m in run["traj"] if m["role"] == "tool"]
        assert [c.result for c in trace.calls] == results
        assert [c.error for c in trace.calls] == [r.startswith("Error:") for r in results]
        texts = [m["content"] for m in run["traj"] if m["role"] == "assistant" and m["content"]]
        assert trace.final_answer == (texts[-1] if texts else "")
        assert trace.metadata["task_id"] == str(run["task_id"])
        assert trace.metadata["trial"] == str(run["trial"])
    assert sum(len(t.calls) for t in traces) == 1164
    # gpt-4o reuses tool-call ids across turns: every reuse is a distinct call, kept and counted.
    reused = sum(
        len(ids) - len(set(ids))
        for run in raw
        for ids in [[tc["id"] for m in run["traj"] for tc in m.get("tool_calls") or []]]
    )
    assert reused > 0
    assert report.id_collisions == reused


SAMPLE = trace_pb2.Trace(
    id="run-1",
    calls=[
        trace_pb2.ToolCall(
            name="search",
            arguments_json='{"q": "été", "n": 9007199254740993}',
            result="3 hits",
            id="c1",
        ),
        trace_pb2.ToolCall(
            name="refund", arguments_json="", result="Error: denied", id="c2", error=True
        ),
        trace_pb2.ToolCall(name="noop", arguments_json='{"x":1}', id="c3"),
    ],
    final_answer="Done: refund denied.",
    # The renderings below open with one user message: one turn (SPEC §10).
    turns=[trace_pb2.Turn(user_input="hi", final_answer="Done: refund denied.")],
)
for _call in SAMPLE.calls:
    _call.turn = 1


def _chat(trace: trace_pb2.Trace) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = [{"role": "user", "content": "hi"}]
    for call in trace.calls:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json},
                    }
                ],
            }
        )
        if call.HasField("result"):
            messages.append({"role": "tool", "tool_call_id": call.id, "content": call.result})
    messages.append({"role": "assistant", "content": trace.final_answer})
    return messages


def _responses(trace: trace_pb2.Trace) -> list[dict[str, object]]:
    items: list[dict[str, object]] = [{"role": "user", "content": "hi"}]
    for call in trace.calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_json,
            }
        )
        if call.HasField("result"):
            items.append(
                {"type": "function_call_output", "call_id": call.id, "output": call.result}
            )
    items.append({"type": "reasoning", "summary": []})
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": trace.final_answer}],
        }
    )
    return items


def test_openai_round_trips(tmp_path: Path) -> None:
    for render in (_chat, _responses):
        path = tmp_path / f"{render.__name__}.jsonl"
        path.write_text(json.dumps({"id": "run-1", "messages": render(SAMPLE)}) + "\n")
        report = ImportReport()
        [trace] = importers.read(path, report=report, error_prefix="Error:")
        assert trace == SAMPLE
        assert report.total_unmapped == 0


def test_openai_reports_what_it_cannot_map() -> None:
    report = ImportReport()
    trace = openai.from_items(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "x", "type": "custom", "custom": {"name": "sh", "input": "ls"}},
                    {"id": "y", "type": "function", "function": {"arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "nope", "content": "orphan"},
            {"type": "web_search_call", "id": "ws"},
            {"type": "mystery"},
            {"role": "assistant", "function_call": {"name": "legacy", "arguments": '{"a":1}'}},
            {"role": "function", "name": "legacy", "content": "ok"},
        ],
        report=report,
    )
    assert [(c.name, c.arguments_json, c.result) for c in trace.calls] == [
        ("legacy", '{"a":1}', "ok")
    ]
    assert report.unmapped == {
        "UNSUPPORTED_TOOL_CALL": 2,
        "TOOL_CALL_WITHOUT_NAME": 1,
        "TOOL_RESULT_WITHOUT_CALL": 1,
        "UNKNOWN_ITEM_TYPE": 1,
    }


def _anthropic(trace: trace_pb2.Trace, inputs: list[str]) -> str:
    # Messages as text so the tool inputs keep their exact digits and key order.
    messages = ['{"role":"user","content":"hi"}']
    for call, raw_input in zip(trace.calls, inputs, strict=True):
        messages.append(
            '{"role":"assistant","content":[{"type":"thinking","thinking":"..."},'
            f'{{"type":"tool_use","id":"{call.id}","name":"{call.name}","input":{raw_input}}}]}}'
        )
        if call.HasField("result"):
            block = {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": [{"type": "text", "text": call.result}],
                "is_error": call.error,
            }
            messages.append(json.dumps({"role": "user", "content": [block]}))
    messages.append(
        json.dumps(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": trace.final_answer[:5]},
                    {"type": "text", "text": trace.final_answer[5:]},
                ],
            }
        )
    )
    return '{"id":"run-1","messages":[' + ",".join(messages) + "]}"


def test_anthropic_round_trip_keeps_exact_numbers_and_key_order(tmp_path: Path) -> None:
    inputs = ['{"q": "été", "n": 9007199254740993}', "{}", '{"x":1}']
    expected = trace_pb2.Trace()
    expected.CopyFrom(SAMPLE)
    expected.calls[0].arguments_json = '{"q":"été","n":9007199254740993}'
    expected.calls[1].arguments_json = "{}"
    path = tmp_path / "claude.jsonl"
    path.write_text(_anthropic(SAMPLE, inputs) + "\n")
    assert importers.detect_format(path) == "anthropic"
    report = ImportReport()
    [trace] = importers.read(path, report=report)
    assert trace == expected
    assert report.total_unmapped == 0

    exact = tmp_path / "exact.json"
    exact.write_text(
        '[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f",'
        '"input":{"z":0.10000000000000001,"a":1.0,"big":1e400,"neg":-0}}]}]'
    )
    [trace] = importers.read(exact)
    assert trace.calls[0].arguments_json == '{"z":0.10000000000000001,"a":1.0,"big":1E+400,"neg":0}'


def test_anthropic_results_and_reports() -> None:
    report = ImportReport()
    trace = anthropic.from_messages(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                    {
                        "type": "server_tool_use",
                        "id": "s",
                        "name": "web_search",
                        "input": {"q": "x"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": "plain",
                        "is_error": True,
                    },
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": "s",
                        "content": {
                            "type": "web_search_tool_result_error",
                            "error_code": "max_uses",
                        },
                    },
                    {"type": "tool_result", "tool_use_id": "ghost", "content": "?"},
                    {"type": "hologram"},
                ],
            },
        ],
        report=report,
    )
    assert [(c.name, c.result, c.error) for c in trace.calls] == [
        ("f", "plain", True),
        ("web_search", '{"type":"web_search_tool_result_error","error_code":"max_uses"}', True),
    ]
    assert report.unmapped == {"TOOL_RESULT_WITHOUT_CALL": 1, "UNKNOWN_ITEM_TYPE": 1}


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([{"role": "assistant", "tool_calls": 5}], "UNRECOGNISED_TOOL_CALL"),
        ([{"type": ["function_call"]}], "UNKNOWN_ITEM_TYPE"),
        ([{"role": "tool", "tool_call_id": ["a"], "content": "x"}], "TOOL_RESULT_WITHOUT_CALL"),
        (
            [
                {"role": "assistant", "tool_calls": [{"id": "a", "name": "f", "arguments": "{}"}]},
                {"role": "tool", "tool_call_id": "a", "content": [{"type": ["text"]}]},
            ],
            "NON_TEXT_RESULT_CONTENT",
        ),
    ],
)
def test_malformed_openai_shapes_are_reported_not_crashes(
    messages: list[object], reason: str
) -> None:
    # Found by mutating real message lists: each used to raise TypeError.
    report = ImportReport()
    openai.from_items(messages, report=report)
    assert report.unmapped[reason] == 1, report.summary()


def test_malformed_anthropic_content_is_reported_not_a_crash() -> None:
    report = ImportReport()
    anthropic.from_messages([{"role": "user", "content": 1.5}], report=report)
    assert report.unmapped["UNRECOGNISED_RECORD"] == 1
