"""Suite files for regrade: native protobuf JSON/YAML; other formats via trajgrade.suite_formats."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from trajgrade.v1 import suite_pb2


class SuiteFileError(Exception):
    """The suite file cannot be read or is not a suite."""


def _other_formats(path: Path) -> suite_pb2.Suite | None:
    # Orbit / promptfoo / ADK suites are a colleague's package; use it when it is there.
    try:
        formats: Any = importlib.import_module("trajgrade.suite_formats")
    except ImportError:
        return None
    loader = getattr(formats, "load_suite", None) or getattr(formats, "load", None)
    if loader is None:
        return None
    suite = loader(str(path))
    return suite if isinstance(suite, suite_pb2.Suite) else None


def load_suite(path: str) -> suite_pb2.Suite:
    """The Suite in `path` (JSON or YAML)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteFileError(f"{path}: {exc.strerror}") from None
    try:
        raw = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SuiteFileError(f"{path}: not JSON or YAML: {exc}") from None
    try:
        return json_format.ParseDict(raw, suite_pb2.Suite())
    except json_format.ParseError as native_error:
        other = _other_formats(file)
        if other is not None:
            return other
        raise SuiteFileError(f"{path}: not a trajgrade.v1.Suite: {native_error}") from None
