"""promptfoo test-case files and `promptfooconfig.yaml`: one native Suite per test.

A config's `defaultTest.assert` comes first in every test (as promptfoo's evaluator merges it),
then the test's own `assert`. `tests` is a list of tests and `file://` references (globs
relative to the config's directory, expanded in sorted order). A test's suite is named by its
`description`, or by its source path when it has none.
"""

from __future__ import annotations

import glob as globbing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trajgrade.suite_formats import promptfoo
from trajgrade.suite_formats.conversion import Conversion, SuiteFormatError
from trajgrade.v1 import suite_pb2

# Test keys that do not change how tool calls are graded (prompt variables, provider options).
_TEST_IGNORED = ("description", "vars", "options", "metadata", "provider", "providerOutput")
# defaultTest keys other than `assert` only feed prompts and providers.
_DEFAULT_IGNORED = ("vars", "options", "metadata", "provider")
_READABLE = (".yaml", ".yml", ".json")

Loader = Callable[[Path], Any]


def convert_tests(obj: Any, *, base: Path | None, load: Loader) -> list[tuple[str, Conversion]]:
    """Every test of a config, a test-case file (a list) or a single test, by suite name.

    `base` is the directory `file://` references are relative to; None refuses them (text
    that did not come from a file of ours). Raises SuiteFormatError for what has no meaning
    (an unreadable reference, duplicate test names); unsupported parts are in each Conversion.
    """
    errors: list[str] = []
    defaults = Conversion(suite_pb2.Suite())
    if promptfoo.is_config(obj):
        for key in obj:
            if key == "scenarios":
                defaults.unsupported.append(
                    "scenarios: promptfoo scenarios (tests crossed with variable sets) are not "
                    "converted; list the tests under `tests`"
                )
        default = obj.get("defaultTest")
        if isinstance(default, str):
            default = _reference(default, "defaultTest", base, load, errors)
            default = default[0][1] if default else None
        if default is not None:
            _default(default, defaults, errors)
        tests = _tests(obj.get("tests"), "tests", base, load, errors)
    elif isinstance(obj, list):
        tests = [(f"[{i}]", t) for i, t in enumerate(obj)]
    else:
        tests = [("", obj)]
    out: list[tuple[str, Conversion]] = []
    seen: dict[str, str] = {}
    for where, test in tests:
        conversion = _test(test, where, defaults, errors)
        if conversion is None:
            continue
        name = conversion.suite.name
        if name in seen:
            errors.append(
                f"{where or 'test'}.description: {name!r} is also the name of "
                f"{seen[name] or 'another test'}; a trace picks its test by this name"
            )
        seen[name] = where
        out.append((name, conversion))
    if not out and not errors:
        errors.append("tests: the file holds no test")
    if errors:
        raise SuiteFormatError(errors)
    return out


def _default(default: Any, defaults: Conversion, errors: list[str]) -> None:
    if not isinstance(default, dict):
        errors.append("defaultTest: must be an object with `assert`")
        return
    for key in default:
        if key != "assert" and key not in _DEFAULT_IGNORED:
            defaults.unsupported.append(f"defaultTest.{key}: not a promptfoo defaultTest key")
    promptfoo.add_assertions(defaults, default.get("assert"), "defaultTest.assert")


def _test(test: Any, where: str, defaults: Conversion, errors: list[str]) -> Conversion | None:
    if not isinstance(test, dict):
        errors.append(f"{where or 'test'}: a test must be an object, got {type(test).__name__}")
        return None
    description = test.get("description")
    name = description if isinstance(description, str) and description else where
    conversion = Conversion(suite_pb2.Suite(name=name), list(defaults.unsupported))
    conversion.suite.assertions.extend(defaults.suite.assertions)
    prefix = f"{where}." if where else ""
    for key in test:
        if key == "threshold":
            conversion.unsupported.append(
                f"{prefix}threshold: promptfoo's score threshold is not converted (a trajgrade "
                "verdict passes when every HARD assertion passes)"
            )
        elif key != "assert" and key not in _TEST_IGNORED:
            conversion.unsupported.append(f"{prefix}{key}: not a promptfoo test key")
    promptfoo.add_assertions(conversion, test.get("assert"), f"{prefix}assert")
    return conversion


def _tests(
    value: Any, where: str, base: Path | None, load: Loader, errors: list[str]
) -> list[tuple[str, Any]]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[tuple[str, Any]] = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]" if isinstance(value, list) else where
        if isinstance(item, str):
            out.extend(_reference(item, at, base, load, errors))
        else:
            out.append((at, item))
    return out


def _reference(
    ref: str, where: str, base: Path | None, load: Loader, errors: list[str]
) -> list[tuple[str, Any]]:
    """The tests in the files a `file://` reference (a glob) names, each with its source path."""
    if base is None:
        errors.append(f"{where}: {ref!r} refers to files; give the config as a file to read them")
        return []
    pattern = ref.removeprefix("file://")
    files = sorted(globbing.glob(str(base / pattern), recursive=True))
    if not files:
        errors.append(f"{where}: {ref!r} matches no file (relative to {base})")
        return []
    out: list[tuple[str, Any]] = []
    for name in files:
        path = Path(name)
        label = _label(path, base)
        if path.suffix.lower() not in _READABLE:
            errors.append(f"{where}: {label}: only YAML and JSON test files are read")
            continue
        try:
            loaded = load(path)
        except (OSError, ValueError) as exc:
            errors.append(f"{where}: {label}: cannot read: {exc}")
            continue
        if isinstance(loaded, list):
            out.extend((f"{label}[{i}]", t) for i, t in enumerate(loaded))
        else:
            out.append((label, loaded))
    return out


def _label(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()
