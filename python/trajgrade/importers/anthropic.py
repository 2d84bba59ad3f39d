"""Anthropic importer: Messages API conversations with tool_use / tool_result blocks."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trajgrade.importers import exact_json
from trajgrade.importers.message_usage import TurnTracker
from trajgrade.importers.records import (
    MESSAGE_LIST_KEYS,
    dumps_untrusted,
    read_conversations,
    wrapper_metadata,
)
from trajgrade.importers.report import (
    CONFLICTING_ID,
    DUPLICATE_TOOL_RESULT,
    NON_TEXT_RESULT_CONTENT,
    TOOL_CALL_WITHOUT_NAME,
    TOOL_RESULT_WITHOUT_CALL,
    UNKNOWN_ITEM_TYPE,
    UNRECOGNISED_RECORD,
    ImportReport,
)
from trajgrade.v1 import trace_pb2

# Calls: client tools, server tools (web search, code execution...) and MCP connector tools.
_CALL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# Blocks that carry nothing to grade: skipped without a report.
_SILENT_BLOCKS = frozenset(
    {"thinking", "redacted_thinking", "image", "document", "search_result", "container_upload"}
)


def read(path: Path, report: ImportReport) -> Iterator[trace_pb2.Trace]:
    """Yield one Trace per conversation in a JSON / JSON Lines file."""
    return read_conversations(
        path, report, iter_conversations, functools.partial(from_messages, report=report)
    )


def iter_conversations(
    value: Any, where: str, report: ImportReport
) -> Iterator[tuple[str, str | None, dict[str, str], list[Any]]]:
    """Find conversations: a message list, `{messages: [...], response?: {...}}`, or a list."""
    if isinstance(value, list):
        if not value or all(isinstance(v, dict) and "role" in v for v in value):
            yield where, None, {}, value
            return
        for position, element in enumerate(value):
            yield from iter_conversations(element, f"{where}[{position}]", report)
        return
    if isinstance(value, dict):
        identifier = value.get("id")
        trace_id = identifier if isinstance(identifier, str) and identifier else None
        for key in MESSAGE_LIST_KEYS:
            if isinstance(value.get(key), list):
                messages = list(value[key])
                # A logged request/response pair: the response is the last assistant turn.
                response = value.get("response")
                if isinstance(response, dict) and "content" in response:
                    messages.append({"role": "assistant", **response})
                meta = wrapper_metadata(value, (key, "response", "system", "model"))
                yield where, trace_id, meta, messages
                return
        if value.get("type") == "message" and "content" in value:
            yield where, trace_id, {}, [value]
            return
    report.add(UNRECOGNISED_RECORD, where, "no message list found")


def from_messages(  # noqa: PLR0912 - one branch per block kind and role
    messages: Sequence[Any],
    *,
    trace_id: str = "",
    metadata: dict[str, str] | None = None,
    report: ImportReport | None = None,
    where: str = "conversation",
) -> trace_pb2.Trace:
    """Map Messages API messages to one Trace.

    `tool_use.input` objects become JSON text via exact_json (key order and number digits as
    parsed); when the messages came from `exact_json.loads` no number passes through float.
    """
    report = report if report is not None else ImportReport()
    calls: list[trace_pb2.ToolCall] = []
    # Calls awaiting a result by id; a reused id pairs with the earliest call still waiting.
    pending: dict[str, list[trace_pb2.ToolCall]] = {}
    answer = ""
    turns = TurnTracker(report)
    call_turns: list[int] = []
    for position, message in enumerate(messages):
        here = f"{where} message {position}"
        if not isinstance(message, dict):
            report.add(UNRECOGNISED_RECORD, here, "not an object")
            continue
        role = message.get("role")
        content = message.get("content")
        blocks: list[Any] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        )
        if not isinstance(blocks, list):
            report.add(UNRECOGNISED_RECORD, here, "content is neither text nor a block list")
            blocks = []
        texts: list[str] = []
        user_texts: list[str] = []
        results = 0
        for number, block in enumerate(blocks):
            at = f"{here} block {number}"
            kind = block.get("type") if isinstance(block, dict) else None
            if not isinstance(block, dict) or not isinstance(kind, str):
                report.add(UNRECOGNISED_RECORD, at, "block without a type")
            elif kind == "text":
                if role == "assistant":
                    texts.append(str(block.get("text", "")))
                elif role == "user":
                    user_texts.append(str(block.get("text", "")))
            elif kind in _CALL_BLOCKS:
                if _add_call(block, calls, pending, report, at):
                    call_turns.append(turns.current)
            elif kind == "tool_result" or kind.endswith("_tool_result"):
                results += 1
                _add_result(block, kind, pending, report, at)
            elif kind not in _SILENT_BLOCKS:
                report.add(UNKNOWN_ITEM_TYPE, at, f"block type {kind!r}")
        # Tool results come back in user messages: only a user message that says something
        # else too (or has no result) starts a turn.
        if role == "user" and (user_texts or not results):
            turns.user_message("".join(user_texts))
        if role == "assistant" and any(texts):
            # Citations split one answer into several text blocks: rejoin them as written.
            answer = "".join(texts)
            turns.answer(answer)
        if message.get("usage") is not None:
            # A logged Message (the wrapper's `response`, or an assistant turn stored whole).
            turns.usage(message["usage"], message.get("model"), here)
    trace = trace_pb2.Trace(id=trace_id, calls=calls, final_answer=answer)
    turns.fill(trace, call_turns)
    trace.metadata.update(metadata or {})
    report.traces += 1
    report.calls += len(calls)
    return trace


def _add_call(
    block: dict[str, Any],
    calls: list[trace_pb2.ToolCall],
    pending: dict[str, list[trace_pb2.ToolCall]],
    report: ImportReport,
    where: str,
) -> bool:
    """Add the call of a tool-use block; False when it has no name (reported)."""
    name = block.get("name")
    if not isinstance(name, str) or not name:
        report.add(TOOL_CALL_WITHOUT_NAME, where)
        return False
    call = trace_pb2.ToolCall(name=name)
    # An MCP connector call names its server (the request's `mcp_servers[].name`).
    if block.get("type") == "mcp_tool_use" and isinstance(block.get("server_name"), str):
        call.server = block["server_name"]
    if "input" in block:
        raw = block["input"]
        # A streamed-and-stored block may keep the input as the partial-JSON text itself.
        call.arguments_json = raw if isinstance(raw, str) else exact_json.dumps(raw)
    call_id = block.get("id")
    if isinstance(call_id, str) and call_id:
        call.id = call_id
        waiting = pending.setdefault(call_id, [])
        if waiting:
            report.add(CONFLICTING_ID, where, f"tool_use id {call_id!r} still pending")
        waiting.append(call)
    calls.append(call)
    return True


def _add_result(
    block: dict[str, Any],
    kind: str,
    pending: dict[str, list[trace_pb2.ToolCall]],
    report: ImportReport,
    where: str,
) -> None:
    call_id = block.get("tool_use_id")
    waiting = pending.get(call_id) if isinstance(call_id, str) else None
    if not waiting:
        seen = isinstance(call_id, str) and call_id in pending
        reason = DUPLICATE_TOOL_RESULT if seen else TOOL_RESULT_WITHOUT_CALL
        report.add(reason, where, f"tool_use_id {call_id!r}")
        return
    call = waiting.pop(0)
    content = block.get("content")
    if kind != "tool_result" and content is not None and not isinstance(content, str):
        # Server and MCP tool results are structured objects or block lists: keep them whole.
        call.result = dumps_untrusted(content)
        if isinstance(content, dict) and str(content.get("type", "")).endswith("_error"):
            call.error = True
    elif isinstance(content, str):
        call.result = content
    elif isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            else:
                part_kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                report.add(NON_TEXT_RESULT_CONTENT, where, f"content block {part_kind!r}")
        call.result = "\n".join(texts)
    elif content is not None:
        call.result = dumps_untrusted(content)
    if block.get("is_error") is True:
        call.error = True
