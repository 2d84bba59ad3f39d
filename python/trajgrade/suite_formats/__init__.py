"""Suite formats: convert Orbit, promptfoo and Google ADK suites to native `Suite` messages.

`convert_all` is the one detection/conversion layer every surface uses (through
`trajgrade.suites`): a parsed source of any non-native format → a `SuiteSet`, the suites it
holds by name plus what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from trajgrade.importers import exact_json
from trajgrade.suite_formats import adk, orbit, promptfoo, promptfoo_files
from trajgrade.suite_formats.conversion import Conversion, SuiteFormatError
from trajgrade.v1 import suite_pb2

__all__ = [
    "FORMATS",
    "Conversion",
    "SuiteFormatError",
    "SuiteSet",
    "convert",
    "convert_all",
    "detect",
    "detect_and_convert",
    "kind_of",
    "load",
    "parse_text",
]

FORMATS = ("native", "orbit", "promptfoo", "adk")


def load(path: str | Path) -> Any:
    """Parse a suite file: JSON with exact numbers, or YAML."""
    path = Path(path)
    return parse_text(
        path.read_text(encoding="utf-8"), json_first=path.suffix.lower() not in (".yaml", ".yml")
    )


def parse_text(text: str, *, json_first: bool = True) -> Any:
    """JSON (exact numbers) when it parses as JSON, else YAML; ValueError when neither."""
    if json_first:
        try:
            return exact_json.loads(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"neither JSON nor YAML: {exc}") from exc


@dataclass
class SuiteSet:
    """The suites one source holds, by name (a promptfoo config has one per test), and the
    parts of the source that were left out (each `path: why`)."""

    format: str
    suites: dict[str, suite_pb2.Suite]
    skipped: list[str] = field(default_factory=list)

    def only(self) -> suite_pb2.Suite:
        """The one suite; SuiteFormatError naming the tests when there are several."""
        if len(self.suites) == 1:
            return next(iter(self.suites.values()))
        raise SuiteFormatError(
            [
                f"suite: the {self.format} source holds {len(self.suites)} suites "
                f"({_names(self.suites)}); pick one by name (CLI: --test NAME)"
            ]
        )

    def pick(self, name: str | None) -> suite_pb2.Suite:
        """The suite of the test `name` (a trace's `metadata.test`); the only one when None."""
        if name is None:
            if len(self.suites) == 1:
                return self.only()
            raise SuiteFormatError(
                [
                    f"metadata.test: the suite file holds {len(self.suites)} tests "
                    f"({_names(self.suites)}); the trace must name one in metadata.test"
                ]
            )
        if name in self.suites:
            return self.suites[name]
        raise SuiteFormatError(
            [f"metadata.test: no test named {name!r}; tests: {_names(self.suites)}"]
        )


def _names(suites: dict[str, suite_pb2.Suite]) -> str:
    shown = [repr(n) for n in list(suites)[:5]]
    return ", ".join(shown) + (f", ... {len(suites) - 5} more" if len(suites) > 5 else "")


def kind_of(obj: Any) -> str:
    """The format of a parsed suite; `native` when no other format fits (its parser then
    names the unknown field)."""
    try:
        return detect(obj)
    except SuiteFormatError:
        return "native"


def convert_all(
    obj: Any,
    kind: str,
    *,
    base: Path | None = None,
    allow_unsupported: bool = False,
    **options: Any,
) -> SuiteSet:
    """Every suite of a parsed non-native source of format `kind`.

    Unsupported parts raise SuiteFormatError listing each, unless `allow_unsupported` (then
    they are left out and listed in `skipped`). A suite with no assertion left is an error.
    `base` is the directory promptfoo `file://` references are read from (None: refused).
    """
    if kind not in FORMATS[1:]:
        raise SuiteFormatError([f"suite: unknown suite format {kind!r}; expected one of {FORMATS}"])
    looks = {"orbit": orbit.looks_like, "promptfoo": promptfoo.looks_like, "adk": adk.looks_like}
    if not looks[kind](obj):
        raise SuiteFormatError([f"suite: the input is not a {kind} suite ({_shape(kind)})"])
    try:
        found = _convert_found(obj, kind, base, options)
    except SuiteFormatError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        # A shape the converter did not expect: still the caller's input, never a crash.
        raise SuiteFormatError([f"suite: not a valid {kind} suite: {exc}"]) from exc
    skipped: list[str] = []
    for _, conversion in found:
        skipped.extend(p for p in conversion.unsupported if p not in skipped)
    if skipped and not allow_unsupported:
        raise SuiteFormatError(skipped)
    empty = [name for name, c in found if not c.suite.assertions]
    if empty:
        raise SuiteFormatError(
            [f"suite: nothing in test {n!r} converts to an assertion" for n in empty]
            if len(found) > 1
            else ["suite: nothing in the input converts to an assertion"]
        )
    return SuiteSet(kind, {name: c.suite for name, c in found}, skipped)


def _convert_found(
    obj: Any, kind: str, base: Path | None, options: dict[str, Any]
) -> list[tuple[str, Conversion]]:
    if kind == "promptfoo" and not _assertion_list(obj):
        return promptfoo_files.convert_tests(obj, base=base, load=load)
    if kind == "adk" and options.get("eval_id") is None and len(adk.cases(obj)) > 1:
        return list(adk.convert_eval_set(obj, config=options.get("config")).items())
    conversion = convert(obj, kind=kind, **options)
    return [(conversion.suite.name, conversion)]


def _assertion_list(obj: Any) -> bool:
    return isinstance(obj, list) and not promptfoo.is_test_list(obj)


def _shape(kind: str) -> str:
    return {
        "orbit": "an object with tool_call_args, expected_tool_sequence, allowed_tools or "
        "expected_tool_calls",
        "promptfoo": "trajectory assertions, a test with `assert`, a list of tests, or a "
        "config with `tests` / `defaultTest`",
        "adk": "an eval set, an eval case or a legacy .test.json list",
    }[kind]


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


def convert(obj: Any, *, kind: str | None = None, **options: Any) -> Conversion:
    """Detect the format (or take `kind`) and convert one suite, with what could not be."""
    kind = kind or detect(obj)
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
