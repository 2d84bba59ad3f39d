"""Suite formats: convert Orbit, promptfoo and Google ADK suites to native `Suite` messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from trajgrade.importers import exact_json
from trajgrade.suite_formats import adk, orbit, promptfoo
from trajgrade.suite_formats.conversion import Conversion, SuiteFormatError
from trajgrade.v1 import suite_pb2

__all__ = [
    "Conversion",
    "SuiteFormatError",
    "convert",
    "detect",
    "detect_and_convert",
    "load",
]


def load(path: str | Path) -> Any:
    """Parse a suite file: JSON with exact numbers, or YAML."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return exact_json.loads(text)
    return yaml.safe_load(text)


def detect(obj: Any) -> str:
    """The format of a parsed suite: native, promptfoo, orbit or adk."""
    if isinstance(obj, dict) and "assertions" in obj:
        return "native"
    if promptfoo.looks_like(obj):
        return "promptfoo"
    if orbit.looks_like(obj):
        return "orbit"
    if adk.looks_like(obj):
        return "adk"
    raise SuiteFormatError(["not a native, Orbit, promptfoo or ADK suite"])


def convert(obj: Any, **options: Any) -> Conversion:
    """Detect the format and convert, returning what could not be converted too."""
    kind = detect(obj)
    if kind == "native":
        suite = suite_pb2.Suite()
        # Native suites reject unknown fields (SPEC §9.27); numbers are in JSON text fields.
        json_format.ParseDict(_plain(obj), suite)
        return Conversion(suite)
    if kind == "promptfoo":
        return promptfoo.convert(obj)
    if kind == "orbit":
        return orbit.convert(obj)
    return adk.convert(obj, config=options.get("config"), eval_id=options.get("eval_id"))


def detect_and_convert(
    obj: Any, *, allow_unsupported: bool = False, **options: Any
) -> suite_pb2.Suite:
    """Convert a parsed suite of any known format to a native Suite.

    Anything the source says that the Suite cannot express raises SuiteFormatError listing
    each part, unless `allow_unsupported` is set (then those parts are left out). ADK takes
    `config=` (a parsed eval config) and `eval_id=`.
    """
    conversion = convert(obj, **options)
    if conversion.unsupported and not allow_unsupported:
        raise SuiteFormatError(conversion.unsupported)
    if not conversion.suite.assertions:
        raise SuiteFormatError(["nothing in the input converts to an assertion"])
    return conversion.suite


def _plain(value: Any) -> Any:
    # ParseDict takes float, not Decimal; native suites keep exact values in JSON text fields.
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "as_integer_ratio") and not isinstance(value, int | float):
        return float(value)
    return value
