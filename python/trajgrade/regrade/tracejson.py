"""Native protobuf-JSON trace text → serialized `trajgrade.v1.Trace` bytes, fast path first."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from trajgrade.v1 import trace_pb2

# Field names as the protobuf JSON mapping accepts them (proto name or lowerCamelCase), mapped to
# the constructor keyword. Anything else goes to json_format, which owns the exact semantics.
_TRACE_KEYS = {
    "id": "id",
    "calls": "calls",
    "final_answer": "final_answer",
    "finalAnswer": "final_answer",
    "metadata": "metadata",
}
_CALL_KEYS = {
    "name": "name",
    "arguments_json": "arguments_json",
    "argumentsJson": "arguments_json",
    "result": "result",
    "error": "error",
    "id": "id",
    "start_time_unix_nano": "start_time_unix_nano",
    "startTimeUnixNano": "start_time_unix_nano",
    "end_time_unix_nano": "end_time_unix_nano",
    "endTimeUnixNano": "end_time_unix_nano",
}


class TraceJsonError(ValueError):
    """A line is not a valid protobuf-JSON Trace; the message is json_format's."""


def _call(raw: dict[str, Any]) -> trace_pb2.ToolCall:
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:  # JSON null means "default" in the protobuf mapping
            continue
        field = _CALL_KEYS[key]
        # The constructors are laxer than the JSON mapping here (1 for a bool, true for a
        # number); leave those to json_format.
        if field == "error" and type(value) is not bool:
            raise TypeError(field)
        if field.endswith("_nano") and type(value) is not int:
            raise TypeError(field)
        kwargs[field] = value
    return trace_pb2.ToolCall(**kwargs)


def _fast(raw: Any) -> bytes:
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        field = _TRACE_KEYS[key]
        kwargs[field] = [_call(call) for call in value] if field == "calls" else value
    return trace_pb2.Trace(**kwargs).SerializeToString()


def trace_bytes_from_dict(raw: dict[str, Any]) -> bytes:
    """A decoded native trace (e.g. a Parquet row as a dict) → serialized Trace."""
    try:
        return _fast(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    try:
        return json_format.ParseDict(raw, trace_pb2.Trace()).SerializeToString()
    except json_format.ParseError as exc:
        raise TraceJsonError(str(exc)) from None


def trace_bytes(line: bytes | str) -> bytes:
    """One native trace (protobuf JSON) → serialized Trace; raises TraceJsonError.

    Fast path: json.loads + the message constructors (upb, in C). Whenever that path meets
    anything unusual (an unknown or misspelled key, a number as a string, a wrong type) the line
    is parsed again by json_format.Parse, so the accepted language and every error message are
    exactly the protobuf JSON mapping's.
    """
    try:
        return _fast(json.loads(line))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    try:
        return json_format.Parse(line, trace_pb2.Trace()).SerializeToString()
    except json_format.ParseError as exc:
        raise TraceJsonError(str(exc)) from None
    except UnicodeDecodeError as exc:  # json_format decodes bytes itself, uncaught
        raise TraceJsonError(f"line is not UTF-8: {exc}") from None


def peek_trace_id(line: bytes | str) -> str:
    """Best-effort id of a line that did not parse, for its error row."""
    try:
        raw = json.loads(line)
    except ValueError:
        return ""
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else ""
