"""Native protobuf-JSON trace text → serialized `trajgrade.v1.Trace` bytes, fast path first."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from trajgrade.v1 import trace_pb2

# Field names as the protobuf JSON mapping accepts them (proto name or lowerCamelCase), mapped to
# the constructor keyword. Anything else goes to json_format, which owns the exact semantics.


def _names(*fields: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for field in fields:
        head, *rest = field.split("_")
        out[field] = field
        out[head + "".join(part.capitalize() for part in rest)] = field
    return out


_TRACE_KEYS = _names("id", "calls", "final_answer", "metadata", "model_calls", "turns")
_CALL_KEYS = _names(
    "name", "arguments_json", "result", "error", "id", "start_time_unix_nano",
    "end_time_unix_nano", "turn", "agent", "server",
)  # fmt: skip
_MODEL_CALL_KEYS = _names(
    "model", "input_tokens", "output_tokens", "cost", "turn", "agent", "start_time_unix_nano",
    "end_time_unix_nano",
)  # fmt: skip
_TURN_KEYS = _names("user_input", "final_answer")
# Fields whose constructor is laxer than the JSON mapping (1 for a bool, true for a number, a
# float for an integer): only the exact JSON type takes the fast path.
_BOOLS = frozenset({"error"})
_INTS = frozenset({"start_time_unix_nano", "end_time_unix_nano", "turn", "input_tokens",
                   "output_tokens"})  # fmt: skip
_DOUBLES = frozenset({"cost"})


class TraceJsonError(ValueError):
    """A line is not a valid protobuf-JSON Trace; the message is json_format's."""


def _fields(raw: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:  # JSON null means "default" in the protobuf mapping
            continue
        field = keys[key]
        if field in _BOOLS and type(value) is not bool:
            raise TypeError(field)
        if field in _INTS and type(value) is not int:
            raise TypeError(field)
        if field in _DOUBLES and type(value) not in (int, float):
            raise TypeError(field)
        kwargs[field] = value
    return kwargs


def _fast(raw: Any) -> bytes:
    kwargs = _fields(raw, _TRACE_KEYS)
    if "calls" in kwargs:
        kwargs["calls"] = [trace_pb2.ToolCall(**_fields(c, _CALL_KEYS)) for c in kwargs["calls"]]
    if "model_calls" in kwargs:
        kwargs["model_calls"] = [
            trace_pb2.ModelCall(**_fields(m, _MODEL_CALL_KEYS)) for m in kwargs["model_calls"]
        ]
    if "turns" in kwargs:
        kwargs["turns"] = [trace_pb2.Turn(**_fields(t, _TURN_KEYS)) for t in kwargs["turns"]]
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
