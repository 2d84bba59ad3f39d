"""Suite inputs: a `Suite` message, its bytes, protobuf-JSON or YAML text, a dict, or a path.

Every form becomes a validated `Suite` message here; unknown fields and malformed text are
`InvalidSuiteError` with a field path, exactly like the core's own validation errors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import yaml
from google.protobuf.message import DecodeError

from trajgrade._core import InvalidSuiteError
from trajgrade._messages import MessageParseError, parse_dict
from trajgrade.v1 import suite_pb2

SuiteInput: TypeAlias = "suite_pb2.Suite | bytes | str | os.PathLike[str] | Mapping[str, Any]"


def invalid_suite(field: str, message: str) -> InvalidSuiteError:
    """An `InvalidSuiteError` raised on the Python side (same attributes as the core's)."""
    err = InvalidSuiteError(f"invalid suite: {field}: {message}" if field else message)
    err.reason_code = "INVALID_SUITE"
    err.field = field
    err.message = message
    err.problems = [(field, message)]
    return err


def suite_from_dict(value: Mapping[str, Any]) -> suite_pb2.Suite:
    """A suite from its protobuf JSON mapping (snake_case or camelCase names, enum names)."""
    try:
        return parse_dict(value, suite_pb2.Suite())
    except MessageParseError as exc:
        raise invalid_suite(exc.field or "suite", exc.message) from exc


def suite_from_text(text: str) -> suite_pb2.Suite:
    """A suite from protobuf-JSON text, or YAML text with the same structure."""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise invalid_suite("suite", f"neither JSON nor YAML: {exc}") from exc
    if not isinstance(value, Mapping):
        raise invalid_suite("suite", "a suite document must be an object")
    return suite_from_dict(value)


def suite_from_path(path: str | os.PathLike[str]) -> suite_pb2.Suite:
    """A suite file: `.json`, `.yaml`/`.yml` (protobuf JSON mapping), or `.pb`/`.binpb` bytes."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise invalid_suite("suite", f"cannot read {p}: {exc.strerror or exc}") from exc
    if p.suffix in (".pb", ".binpb"):
        return suite_from_bytes(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_suite("suite", f"{p} is not UTF-8 text") from exc
    return suite_from_text(text)


def suite_from_bytes(data: bytes) -> suite_pb2.Suite:
    try:
        return suite_pb2.Suite.FromString(data)
    except DecodeError as exc:
        raise invalid_suite("suite", f"undecodable Suite bytes: {exc}") from exc


def looks_like_path(text: str) -> bool:
    # A str is a path when it is one line naming an existing file; anything else is text.
    return "\n" not in text and not text.lstrip().startswith(("{", "[")) and Path(text).is_file()


def load_suite(suite: SuiteInput) -> suite_pb2.Suite:
    """Any accepted suite form → a `Suite` message (not yet compiled)."""
    if isinstance(suite, suite_pb2.Suite):
        return suite
    if isinstance(suite, bytes | bytearray | memoryview):
        return suite_from_bytes(bytes(suite))
    if isinstance(suite, os.PathLike):
        return suite_from_path(suite)
    if isinstance(suite, str):
        return suite_from_path(suite) if looks_like_path(suite) else suite_from_text(suite)
    if isinstance(suite, Mapping):
        return suite_from_dict(suite)
    raise TypeError(f"unsupported suite input: {type(suite).__name__}")


def suite_bytes(suite: SuiteInput) -> bytes:
    """The serialized `Suite` the core compiles (deterministic encoding)."""
    return load_suite(suite).SerializeToString(deterministic=True)
