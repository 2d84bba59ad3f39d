"""Trace inputs: a `Trace` message, its bytes, a dict, JSON text or a path to a JSON file."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from trajgrade._core import InvalidRequestError, encode_trace_dict
from trajgrade._messages import MessageParseError, parse_dict
from trajgrade.suites import looks_like_path
from trajgrade.v1 import trace_pb2

TraceInput: TypeAlias = "trace_pb2.Trace | bytes | str | os.PathLike[str] | Mapping[str, Any]"


def invalid_trace(field: str, message: str) -> InvalidRequestError:
    """An `InvalidRequestError` raised on the Python side (same attributes as the core's)."""
    err = InvalidRequestError(f"{field}: {message}" if field else message)
    err.reason_code = "INVALID_TRACE"
    err.field = field
    err.message = message
    return err


def trace_from_dict(value: Mapping[str, Any], field: str = "trace") -> trace_pb2.Trace:
    try:
        return parse_dict(value, trace_pb2.Trace())
    except MessageParseError as exc:
        path = f"{field}.{exc.field}" if exc.field else field
        raise invalid_trace(path, exc.message) from exc


def trace_from_text(text: str, field: str = "trace") -> trace_pb2.Trace:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_trace(field, f"not JSON: {exc}") from exc
    if not isinstance(value, Mapping):
        raise invalid_trace(field, "a trace must be a JSON object")
    return trace_from_dict(value, field)


def trace_bytes(trace: TraceInput, field: str = "trace") -> bytes:
    """Any accepted trace form → serialized `Trace` bytes (bytes pass through undecoded)."""
    if isinstance(trace, bytes | bytearray | memoryview):
        return bytes(trace)
    if isinstance(trace, trace_pb2.Trace):
        message = trace
    elif isinstance(trace, os.PathLike) or (isinstance(trace, str) and looks_like_path(trace)):
        # Like suites: a one-line str naming an existing file is a path to a JSON trace.
        message = trace_from_text(Path(trace).read_text(encoding="utf-8"), str(trace))
    elif isinstance(trace, str):
        message = trace_from_text(trace, field)
    elif isinstance(trace, Mapping):
        encoded = encode_trace_dict(trace)  # the plain shapes, encoded by the binding
        if encoded is not None:
            return encoded
        message = trace_from_dict(trace, field)
    else:
        raise invalid_trace(field, f"unsupported trace input: {type(trace).__name__}")
    try:
        return message.SerializeToString(deterministic=True)
    except (ValueError, UnicodeError) as exc:  # e.g. a lone surrogate in a str field
        raise invalid_trace(field, f"unencodable trace: {exc}") from exc
