"""Orbit trajectory assertions (`tool_call_args`, `expected_tool_sequence`, ...) as a Suite.

Both shapes of an argument rule are read: Orbit's nested `match: {mode, args | pattern, flags}`
and the flat form with the same keys beside `tool`. Every problem names its source path; a
value that cannot mean anything is an error, a key we do not know is "unsupported" (an error
unless the caller allows leaving it out, and then the whole entry it sits in is left out, so a
misspelt key never loosens a check silently).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from trajgrade.suite_formats.conversion import Conversion, SuiteFormatError, json_text
from trajgrade.v1 import assertion_pb2, suite_pb2

KEYS = ("tool_call_args", "expected_tool_sequence", "allowed_tools", "expected_tool_calls")
_TOP_KEYS = (*KEYS, "name", "description")
_A = assertion_pb2
_MODES = {
    "exact": _A.MATCH_MODE_EXACT,
    "subset": _A.MATCH_MODE_SUBSET,
    "regex": _A.MATCH_MODE_REGEX,
}
_MATCH_KEYS = ("mode", "args", "pattern", "flags", "ignore", "defaults")
_ENTRY_KEYS = ("tool", "match", "call_index", "quantifier")
_STEP_KEYS = ("tool", "match")
_SEQUENCE_MODES = {
    "in_order": _A.SEQUENCE_MODE_IN_ORDER,
    "exact": _A.SEQUENCE_MODE_EXACT,
    "any_order": _A.SEQUENCE_MODE_ANY_ORDER,
}


def looks_like(obj: Any) -> bool:
    """An object with at least one Orbit key."""
    return isinstance(obj, dict) and any(key in obj for key in KEYS)


class _SkipError(Exception):
    """An unsupported part: the entry it belongs to is left out (or the conversion fails)."""


class _InvalidError(Exception):
    """A value that cannot be converted with any meaning: always an error."""


def convert(obj: dict[str, Any]) -> Conversion:
    """Convert in a fixed order: args checks, the sequence, the allowlist, presence checks.

    Raises SuiteFormatError listing every invalid value; unknown keys are returned as
    `unsupported` (the caller decides whether that is fatal).
    """
    name = obj.get("name")
    conversion = Conversion(suite_pb2.Suite(name=name if isinstance(name, str) else ""))
    errors: list[str] = []
    if name is not None and not isinstance(name, str):
        errors.append("name: must be a string")
    for key in obj:
        if key not in _TOP_KEYS:
            conversion.unsupported.append(
                f"{key}: not an Orbit trajectory key (expected one of {', '.join(_TOP_KEYS)})"
            )
    assertions = conversion.suite.assertions

    def attempt(where: str, build: Callable[[], _A.Assertion]) -> None:
        try:
            made = build()
        except _SkipError as exc:
            conversion.unsupported.append(f"{where}{exc} (left out)")
        except _InvalidError as exc:
            errors.append(f"{where}{exc}")
        else:
            assertions.append(made)

    args = obj.get("tool_call_args")
    if args is not None and not isinstance(args, dict | list):
        errors.append("tool_call_args: must be a list of {tool, match} entries")
    for where, entry in _entries(args):
        attempt(where, functools.partial(_tool_call_args, entry))
    if "expected_tool_sequence" in obj:
        attempt(
            "expected_tool_sequence", functools.partial(_sequence, obj["expected_tool_sequence"])
        )
    if "allowed_tools" in obj:
        attempt("allowed_tools", functools.partial(_allowed, obj["allowed_tools"]))
    presence = obj.get("expected_tool_calls")
    if presence is not None and not isinstance(presence, list):
        errors.append("expected_tool_calls: must be a list of tool names")
    for index, tool in enumerate(presence if isinstance(presence, list) else []):
        attempt(f"expected_tool_calls[{index}]", functools.partial(_presence, tool))
    if errors:
        raise SuiteFormatError(errors)
    return conversion


def _entries(args: Any) -> list[tuple[str, Any]]:
    if isinstance(args, dict):
        # A mapping `{tool: expected_args}` is the short form of flat EXACT entries.
        return [(f"tool_call_args.{t}", {"tool": t, "args": a}) for t, a in args.items()]
    if isinstance(args, list):
        return [(f"tool_call_args[{i}]", entry) for i, entry in enumerate(args)]
    return []


def _tool_name(value: dict[str, Any]) -> str:
    tool = value.get("tool")
    if not isinstance(tool, str) or not tool:
        raise _InvalidError(".tool: needs a tool name (a non-empty string)")
    return tool


def _match(spec: dict[str, Any], where: str, *, default_mode: str | None) -> _A.ArgsMatch:
    """An Orbit match object (nested, or the flat keys of an entry) as an ArgsMatch."""
    raw_mode = spec.get("mode", default_mode)
    if raw_mode is None:
        raise _InvalidError(f"{where}.mode: missing; expected exact, subset, regex")
    mode = raw_mode.lower() if isinstance(raw_mode, str) else None
    if mode not in _MODES:
        raise _InvalidError(
            f"{where}.mode: unknown mode {raw_mode!r}; expected exact, subset, regex"
        )
    match = _A.ArgsMatch(mode=_MODES[mode])
    if mode == "regex":
        return _regex(spec, where, match)
    for key in ("pattern", "flags"):
        if key in spec:
            raise _InvalidError(f"{where}.{key}: only mode regex takes {key}")
    if "args" not in spec:
        raise _InvalidError(f"{where}.args: mode {mode} needs the expected args")
    expected = spec["args"]
    if mode == "subset" and not isinstance(expected, dict):
        raise _InvalidError(f"{where}.args: mode subset needs an object of expected keys")
    match.args_json = json_text(expected)
    ignore = spec.get("ignore", [])
    if not isinstance(ignore, list) or not all(isinstance(k, str) for k in ignore):
        raise _InvalidError(f"{where}.ignore: must be a list of key paths")
    match.ignore.extend(ignore)
    if spec.get("defaults") is not None:
        if not isinstance(spec["defaults"], dict):
            raise _InvalidError(f"{where}.defaults: must be an object")
        match.defaults_json = json_text(spec["defaults"])
    return match


def _regex(spec: dict[str, Any], where: str, match: _A.ArgsMatch) -> _A.ArgsMatch:
    for key in ("args", "ignore", "defaults"):
        if key in spec:
            raise _InvalidError(f"{where}.{key}: not used by mode regex (it tests `pattern`)")
    pattern, flags = spec.get("pattern"), spec.get("flags", "")
    if not isinstance(pattern, str):
        raise _InvalidError(f"{where}.pattern: mode regex needs a pattern string")
    if not isinstance(flags, str):
        raise _InvalidError(f"{where}.flags: must be a string such as 'i'")
    match.pattern, match.flags = pattern, flags
    return match


def _split(value: dict[str, Any], allowed: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """The match spec of an entry or step: its nested `match`, or its flat keys."""
    flat = {k: v for k, v in value.items() if k in _MATCH_KEYS}
    if "match" in value and flat:
        raise _InvalidError(
            f".{next(iter(flat))}: give the argument rule either inside `match` or "
            "beside `tool`, not both"
        )
    for key in value:
        if key not in allowed and key not in _MATCH_KEYS:
            raise _SkipError(f".{key}: unknown key; expected {', '.join(allowed)}")
    if "match" not in value:
        return flat, ""
    nested = value["match"]
    if not isinstance(nested, dict):
        raise _InvalidError(".match: must be an object {mode, args | pattern, flags}")
    for key in nested:
        if key not in _MATCH_KEYS:
            raise _SkipError(f".match.{key}: unknown key; expected {', '.join(_MATCH_KEYS)}")
    return nested, ".match"


def _tool_call_args(entry: Any) -> _A.Assertion:
    if not isinstance(entry, dict):
        raise _InvalidError(f": an entry must be an object, got {type(entry).__name__}")
    tool = _tool_name(entry)
    spec, where = _split(entry, _ENTRY_KEYS)
    check = _A.ToolCallArgs(tool=tool, match=_match(spec, where, default_mode="exact"))
    index = entry.get("call_index")
    if index is not None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 < abs(index) < 2**31:
            raise _InvalidError(f".call_index: must be a 1-based integer, got {index!r}")
        check.call_index = index
    quantifier = entry.get("quantifier", "any")
    if not isinstance(quantifier, str) or quantifier not in ("any", "all"):
        raise _InvalidError(f".quantifier: {quantifier!r}; expected any or all")
    check.quantifier = _A.QUANTIFIER_ALL if quantifier == "all" else _A.QUANTIFIER_ANY
    return _A.Assertion(tool_call_args=check)


def _sequence(value: Any) -> _A.Assertion:
    steps, mode = value, "in_order"
    if isinstance(value, dict):
        for key in value:
            if key not in ("steps", "mode"):
                raise _SkipError(f".{key}: unknown key; expected steps, mode")
        steps, mode = value.get("steps"), value.get("mode", "in_order")
    if not isinstance(steps, list) or not steps:
        raise _InvalidError(": needs a non-empty list of steps")
    if not isinstance(mode, str) or mode not in _SEQUENCE_MODES:
        raise _InvalidError(f".mode: {mode!r}; expected in_order, exact, any_order")
    out = []
    for index, step in enumerate(steps):
        where = f"[{index}]"
        if isinstance(step, str) and step:
            out.append(_A.SequenceStep(tool=step))
            continue
        try:
            if not isinstance(step, dict):
                raise _InvalidError(": a step is a tool name or an object {tool, match}")
            made = _A.SequenceStep(tool=_tool_name(step))
            spec, at = _split(step, _STEP_KEYS)
            if spec:
                made.match.CopyFrom(_match(spec, at, default_mode="exact"))
        except (_InvalidError, _SkipError) as exc:
            raise type(exc)(f"{where}{exc}") from None
        out.append(made)
    return _A.Assertion(tool_sequence=_A.ToolSequence(steps=out, mode=_SEQUENCE_MODES[mode]))


def _allowed(value: Any) -> _A.Assertion:
    if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
        raise _InvalidError(": must be a list of tool names")
    return _A.Assertion(allowed_tools=_A.ToolList(tools=value))


def _presence(tool: Any) -> _A.Assertion:
    name = tool.get("tool") if isinstance(tool, dict) else tool
    if isinstance(tool, dict) and set(tool) - {"tool"}:
        raise _SkipError(f".{next(iter(set(tool) - {'tool'}))}: unknown key; expected tool")
    if not isinstance(name, str) or not name:
        raise _InvalidError(": needs a tool name")
    return _A.Assertion(tool_called=_A.ToolCalled(tool=name))
