"""OpenAI importer: Chat Completions message lists and Responses API items."""

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
    NON_TEXT_ANSWER_CONTENT,
    NON_TEXT_RESULT_CONTENT,
    TOOL_CALL_WITHOUT_NAME,
    TOOL_RESULT_WITHOUT_CALL,
    UNKNOWN_ITEM_TYPE,
    UNRECOGNISED_RECORD,
    UNRECOGNISED_TOOL_CALL,
    UNSUPPORTED_TOOL_CALL,
    ImportReport,
)
from trajgrade.v1 import trace_pb2

# Responses API items that carry no tool call, result or answer: skipped without a report.
_SILENT_ITEM_TYPES = frozenset(
    {
        "reasoning",
        "item_reference",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "compaction",
    }
)
# Built-in (hosted) tool items: real tool use, but with no function name and JSON arguments.
_HOSTED_TOOL_SUFFIXES = ("_call", "_call_output")
_TEXT_PART_TYPES = frozenset({"text", "output_text", "input_text"})


def read(
    path: Path, report: ImportReport, *, error_prefix: str | None = None
) -> Iterator[trace_pb2.Trace]:
    """Yield one Trace per conversation in a JSON / JSON Lines file."""
    build = functools.partial(from_items, report=report, error_prefix=error_prefix)
    return read_conversations(path, report, iter_conversations, build)


def iter_conversations(
    value: Any, where: str, report: ImportReport
) -> Iterator[tuple[str, str | None, dict[str, str], list[Any]]]:
    """Find conversations in a record: a message/item list, a wrapper object, or a list of them.

    Yields `(where, id or None, metadata, items)`.
    """
    if isinstance(value, list):
        if not value or all(_is_item(v) for v in value):
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
                yield where, trace_id, wrapper_metadata(value, (key,)), value[key]
                return
        # A Responses API request + response pair, or a stored Response object.
        if isinstance(value.get("input"), list) or isinstance(value.get("output"), list):
            items = list(value.get("input") or []) + list(value.get("output") or [])
            meta = wrapper_metadata(value, ("input", "output", "usage"))
            yield where, trace_id, meta, items + _usage_record(value)
            return
        # A Chat Completions response object: the assistant message of its first choice.
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            yield where, trace_id, {}, [choices[0].get("message"), *_usage_record(value)]
            return
    report.add(UNRECOGNISED_RECORD, where, "no message list found")


def _is_item(value: Any) -> bool:
    return isinstance(value, dict) and ("role" in value or "type" in value)


def _usage_record(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A response's `usage` (and `model`) as a usage record item: one model call."""
    if "usage" not in response or response["usage"] is None:
        return []
    return [{"usage": response["usage"], "model": response.get("model")}]


def _is_usage_record(item: dict[str, Any]) -> bool:
    """An item that only says what one model call used: `{usage, model?}`."""
    return "usage" in item and set(item) <= {"usage", "model"}


def from_items(
    items: Sequence[Any],
    *,
    trace_id: str = "",
    metadata: dict[str, str] | None = None,
    report: ImportReport | None = None,
    where: str = "conversation",
    error_prefix: str | None = None,
) -> trace_pb2.Trace:
    """Map Chat Completions messages and/or Responses API items to one Trace."""
    builder = _Builder(report if report is not None else ImportReport(), error_prefix)
    for position, item in enumerate(items):
        builder.item(item, f"{where} messages[{position}]")
    trace = trace_pb2.Trace(id=trace_id, calls=builder.calls, final_answer=builder.answer)
    builder.turns.fill(trace, builder.call_turns)
    trace.metadata.update(metadata or {})
    builder.report.traces += 1
    builder.report.calls += len(builder.calls)
    return trace


def _is_text_part(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and kind in _TEXT_PART_TYPES


class _Builder:
    def __init__(self, report: ImportReport, error_prefix: str | None) -> None:
        self.report = report
        self.error_prefix = error_prefix
        self.calls: list[trace_pb2.ToolCall] = []
        # Calls awaiting a result, by id. Real logs reuse ids (tau-bench does), so a result
        # pairs with the earliest call of that id that has none yet.
        self.pending: dict[str, list[trace_pb2.ToolCall]] = {}
        self.answer = ""
        # Legacy `function_call` messages carry no id; results pair with them by name.
        self.legacy_pending: list[trace_pb2.ToolCall] = []
        self.turns = TurnTracker(report)
        # The turn of each call in `calls`.
        self.call_turns: list[int] = []

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            self.report.add(UNRECOGNISED_RECORD, where, "not an object")
            return
        if _is_usage_record(item):
            self.turns.usage(item["usage"], item.get("model"), where)
            return
        self.one_item(item, where)
        # A message or output item may carry its own call's usage (gateways and agent logs).
        if item.get("usage") is not None:
            self.turns.usage(item["usage"], item.get("model"), where)

    def one_item(self, item: dict[str, Any], where: str) -> None:
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and isinstance(role, str):
            self.message(item, role, where)
        elif kind == "function_call":
            self.add_call(
                item.get("call_id") or item.get("id"),
                item.get("name"),
                item.get("arguments"),
                where,
            )
        elif kind == "function_call_output":
            self.add_result(item.get("call_id"), item.get("output"), where)
        elif kind == "mcp_call":
            call = self.add_call(item.get("id"), item.get("name"), item.get("arguments"), where)
            if call is not None:
                if isinstance(item.get("server_label"), str):
                    call.server = item["server_label"]
                if item.get("output") is not None:
                    call.result = self.result_text(item.get("output"), where)
                call.error = bool(item.get("error"))
                if item.get("error") and not call.HasField("result"):
                    call.result = self.result_text(item.get("error"), where)
        elif isinstance(kind, str) and kind in _SILENT_ITEM_TYPES:
            return
        elif isinstance(kind, str) and kind.endswith(_HOSTED_TOOL_SUFFIXES):
            self.report.add(UNSUPPORTED_TOOL_CALL, where, f"item type {kind}")
        else:
            self.report.add(UNKNOWN_ITEM_TYPE, where, f"item type {kind!r}")

    def message(self, message: dict[str, Any], role: str, where: str) -> None:
        if role == "user":
            # Each user message starts a turn (tool results are `tool` messages or items).
            self.turns.user_message(self.user_text(message.get("content")))
        if role == "assistant":
            text = self.answer_text(message.get("content"), where)
            if text:
                self.answer = text
                self.turns.answer(text)
            tool_calls = message.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                self.report.add(UNRECOGNISED_TOOL_CALL, f"{where}.tool_calls", "not a list")
                tool_calls = []
            for position, tool_call in enumerate(tool_calls):
                self.chat_tool_call(tool_call, f"{where}.tool_calls[{position}]")
            legacy = message.get("function_call")
            if isinstance(legacy, dict):
                call = self.add_call(None, legacy.get("name"), legacy.get("arguments"), where)
                if call is not None:
                    self.legacy_pending.append(call)
        elif role == "tool":
            self.add_result(message.get("tool_call_id"), message.get("content"), where)
        elif role == "function":
            name = message.get("name")
            match = next((c for c in self.legacy_pending if c.name == name), None)
            if match is None:
                self.report.add(TOOL_RESULT_WITHOUT_CALL, where, f"function result {name!r}")
                return
            self.legacy_pending.remove(match)
            self.set_result(match, message.get("content"), where)

    def chat_tool_call(self, tool_call: Any, where: str) -> None:
        if not isinstance(tool_call, dict):
            self.report.add(UNRECOGNISED_RECORD, where, "tool call is not an object")
            return
        function = tool_call.get("function")
        if function is None and "type" not in tool_call and "name" in tool_call:
            # The flat shape agents log themselves (`{"id", "name", "arguments"}`, as in
            # mini-agent loops and the rule-based trajectory lesson): the same three fields.
            self.add_call(tool_call.get("id"), tool_call["name"], tool_call.get("arguments"), where)
            return
        if function is None and "type" not in tool_call:
            keys = ", ".join(map(repr, tool_call)) or "none"
            self.report.add(
                UNRECOGNISED_TOOL_CALL,
                where,
                f"no 'function' object and no 'name' (keys: {keys})",
            )
            return
        if tool_call.get("type", "function") != "function" or not isinstance(function, dict):
            # Custom tools take free text, not JSON arguments: nothing sound to map them to.
            self.report.add(
                UNSUPPORTED_TOOL_CALL, where, f"tool call type {tool_call.get('type')!r}"
            )
            return
        self.add_call(tool_call.get("id"), function.get("name"), function.get("arguments"), where)

    def add_call(
        self, call_id: Any, name: Any, arguments: Any, where: str
    ) -> trace_pb2.ToolCall | None:
        if not isinstance(name, str) or not name:
            self.report.add(TOOL_CALL_WITHOUT_NAME, where)
            return None
        call = trace_pb2.ToolCall(name=name)
        if isinstance(arguments, str):
            # Verbatim: the model's own text is what the argument matchers must see.
            call.arguments_json = arguments
        elif arguments is not None:
            call.arguments_json = exact_json.dumps(arguments)
        if isinstance(call_id, str) and call_id:
            call.id = call_id
            if call_id in self.pending:
                # Reused (tau-bench's gpt-4o does): a distinct call all the same, kept.
                self.report.id_collisions += 1
            waiting = self.pending.setdefault(call_id, [])
            if waiting:
                self.report.add(CONFLICTING_ID, where, f"tool call id {call_id!r} still pending")
            waiting.append(call)
        self.calls.append(call)
        self.call_turns.append(self.turns.current)
        return call

    def add_result(self, call_id: Any, content: Any, where: str) -> None:
        waiting = self.pending.get(call_id) if isinstance(call_id, str) else None
        if not waiting:
            seen = isinstance(call_id, str) and call_id in self.pending
            reason = DUPLICATE_TOOL_RESULT if seen else TOOL_RESULT_WITHOUT_CALL
            self.report.add(reason, where, f"tool_call_id {call_id!r}")
            return
        self.set_result(waiting.pop(0), content, where)

    def set_result(self, call: trace_pb2.ToolCall, content: Any, where: str) -> None:
        text = self.result_text(content, where)
        call.result = text
        if self.error_prefix is not None and text.startswith(self.error_prefix):
            call.error = True

    def result_text(self, content: Any, where: str) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = []
            for part in content:
                if isinstance(part, dict) and _is_text_part(part):
                    texts.append(str(part.get("text", "")))
                else:
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    self.report.add(NON_TEXT_RESULT_CONTENT, where, f"part type {kind!r}")
            return "\n".join(texts)
        if content is None:
            return ""
        return dumps_untrusted(content)

    @staticmethod
    def user_text(content: Any) -> str:
        """A user message's text: the string, or its text parts joined (images are left out)."""
        if isinstance(content, str):
            return content
        parts = content if isinstance(content, list) else []
        return "".join(
            str(p.get("text", "")) for p in parts if isinstance(p, dict) and _is_text_part(p)
        )

    def answer_text(self, content: Any, where: str) -> str:
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            return ""
        texts = []
        for part in content:
            if isinstance(part, dict) and _is_text_part(part):
                texts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                self.report.add(NON_TEXT_ANSWER_CONTENT, where, f"part type {kind!r}")
        return "".join(texts)
