"""Suite inputs: a `Suite` message, its bytes, JSON or YAML text, a dict, or a path.

Every form of every suite format (native, Orbit, promptfoo, Google ADK; detected, or named by
`format=`) becomes `Suite` messages here; unknown fields, malformed text and parts of another
format that cannot be converted are `InvalidSuiteError` with a field path, exactly like the
core's own validation errors. The library, the CLI and the Python client all read suites here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeAlias

import yaml
from google.protobuf.message import DecodeError

from trajgrade._core import InvalidSuiteError
from trajgrade._messages import MessageParseError, parse_dict
from trajgrade.importers import exact_json
from trajgrade.suite_formats import FORMATS, SuiteFormatError, SuiteSet, convert_all, kind_of
from trajgrade.suite_formats import parse_text as _parse_text
from trajgrade.v1 import suite_pb2

SuiteInput: TypeAlias = (
    "suite_pb2.Suite | bytes | str | os.PathLike[str] | Mapping[str, Any] | list[Any]"
)
SUITE_FORMATS = ("auto", *FORMATS)


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


def format_error(exc: SuiteFormatError) -> InvalidSuiteError:
    """A conversion's problems (`path: message` each) as one InvalidSuiteError."""
    pairs = [_field_and_message(p) for p in exc.problems]
    err = invalid_suite(*pairs[0])
    err.problems = pairs
    if len(pairs) > 1:
        err.args = ("invalid suite: " + "; ".join(f"{f}: {m}" for f, m in pairs),)
    return err


def _field_and_message(problem: str) -> tuple[str, str]:
    head, sep, tail = problem.partition(": ")
    # A leading source path has no spaces; a sentence without one is about the whole suite.
    if sep and " " not in head:
        return head, tail
    return "suite", problem


def _native(suite: suite_pb2.Suite) -> SuiteSet:
    return SuiteSet("native", {suite.name: suite})


def _converted(
    value: Any,
    text: str | None,
    fmt: str,
    base: Path | None,
    allow_unsupported: bool,
    *,
    source: Path | None = None,
) -> SuiteSet:
    kind = kind_of(value) if fmt == "auto" else fmt
    if kind == "native":
        if text is not None:
            return _native(suite_from_text(text))
        if not isinstance(value, Mapping):
            raise invalid_suite("suite", "a suite document must be an object")
        return _native(suite_from_dict(value))
    options = {"config": _adk_config(source)} if kind == "adk" and source is not None else {}
    try:
        return convert_all(value, kind, base=base, allow_unsupported=allow_unsupported, **options)
    except SuiteFormatError as exc:
        raise format_error(exc) from None


def _adk_config(source: Path) -> Any:
    """The `test_config.json` beside an ADK eval file, as ADK's AgentEvaluator finds it."""
    path = source.parent / "test_config.json"
    if path.resolve() == source.resolve() or not path.is_file():
        return None
    try:
        config = _parse_text(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise invalid_suite("test_config.json", f"cannot read {path}: {exc}") from exc
    if not isinstance(config, Mapping) or not isinstance(config.get("criteria"), Mapping):
        raise invalid_suite("test_config.json", f"{path} has no `criteria` object")
    return config


def _parse(text: str, *, json_first: bool = True) -> Any:
    try:
        return _parse_text(text, json_first=json_first)
    except ValueError as exc:
        raise invalid_suite("suite", str(exc)) from exc
    except RecursionError:
        raise invalid_suite("suite", "the document is nested too deeply") from None


def load_suites(
    suite: SuiteInput, *, format: str = "auto", allow_unsupported: bool = False
) -> SuiteSet:
    """Any accepted suite form of any format → its suites by name (a promptfoo config holds
    one per test) and the parts left out with `allow_unsupported=True`.

    `format` is `auto` (detect) or one of native, orbit, promptfoo, adk. promptfoo `file://`
    references are read relative to the file's directory (the working directory for text).
    """
    if format not in SUITE_FORMATS:
        raise invalid_suite("suite", f"unknown suite format {format!r}; expected {SUITE_FORMATS}")
    if isinstance(suite, suite_pb2.Suite):
        return _native(suite)
    if isinstance(suite, bytes | bytearray | memoryview):
        return _native(suite_from_bytes(bytes(suite)))
    if isinstance(suite, os.PathLike) or (isinstance(suite, str) and looks_like_path(suite)):
        return _from_path(Path(suite), format, allow_unsupported)
    if isinstance(suite, str):
        return _converted(_parse(suite), suite, format, Path.cwd(), allow_unsupported)
    if isinstance(suite, Mapping):
        return _converted(dict(suite), None, format, Path.cwd(), allow_unsupported)
    if isinstance(suite, list):
        # promptfoo assertion lists and test-case files, ADK's legacy turn lists.
        return _converted(suite, None, format, Path.cwd(), allow_unsupported)
    raise TypeError(f"unsupported suite input: {type(suite).__name__}")


def _from_path(p: Path, fmt: str, allow_unsupported: bool) -> SuiteSet:
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise invalid_suite("suite", f"cannot read {p}: {exc.strerror or exc}") from exc
    if p.suffix in (".pb", ".binpb"):
        return _native(suite_from_bytes(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_suite("suite", f"{p} is not UTF-8 text") from exc
    value = _parse(text, json_first=p.suffix.lower() not in (".yaml", ".yml"))
    return _converted(value, text, fmt, p.parent, allow_unsupported, source=p)


def import_text(
    text: str, *, format: str = "auto", allow_unsupported: bool = False, name: str = ""
) -> tuple[suite_pb2.Suite, SuiteSet]:
    """One suite from untrusted text (the ImportSuite RPC): no file is ever read (promptfoo
    `file://` references are errors), YAML aliases are refused (they can expand a small text
    into a huge structure), and nesting too deep for the parser is an error, not a crash.

    Returns the suite (`name` picks one of several) and the SuiteSet it came from.
    """
    if format not in SUITE_FORMATS:
        raise invalid_suite("format", f"unknown suite format {format!r}; expected {SUITE_FORMATS}")
    try:
        value = _parse_untrusted(text)
        kind = kind_of(value) if format == "auto" else format
        if kind == "native":
            if not isinstance(value, Mapping):
                raise invalid_suite("suite", "a suite document must be an object")
            found = _native(suite_from_dict(_plain_numbers(value)))
        else:
            found = convert_all(value, kind, base=None, allow_unsupported=allow_unsupported)
        return (found.pick(name) if name else found.only()), found
    except SuiteFormatError as exc:
        raise format_error(exc) from None
    except RecursionError:
        raise invalid_suite("text", "the document is nested too deeply") from None


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases (*name) are not accepted here")
        return super().compose_node(parent, index)


def _parse_untrusted(text: str) -> Any:
    try:
        return exact_json.loads(text)
    except ValueError:
        pass
    try:
        # A SafeLoader subclass: safe_load's constructors, without aliases.
        return yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as exc:
        raise invalid_suite("text", f"neither JSON nor YAML: {exc}") from exc


def _plain_numbers(value: Any) -> Any:
    # The native parser takes floats; exact digits live in the JSON text fields anyway.
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    if isinstance(value, Decimal):
        return float(value)
    return value


def load_suite(
    suite: SuiteInput, *, format: str = "auto", allow_unsupported: bool = False
) -> suite_pb2.Suite:
    """Any accepted suite form of any format → one `Suite` message (not yet compiled).

    A source holding several suites (a promptfoo config with several tests) is an error
    naming them: use `load_suites` and pick one.
    """
    found = load_suites(suite, format=format, allow_unsupported=allow_unsupported)
    try:
        return found.only()
    except SuiteFormatError as exc:
        raise format_error(exc) from None


def suite_bytes(suite: SuiteInput) -> bytes:
    """The serialized `Suite` the core compiles (deterministic encoding)."""
    return load_suite(suite).SerializeToString(deterministic=True)
