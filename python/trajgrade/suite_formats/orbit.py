"""Orbit-style suite objects (`tool_call_args`, `expected_tool_sequence`, ...) as a Suite."""

from __future__ import annotations

from typing import Any

from trajgrade.suite_formats.conversion import Conversion, json_text
from trajgrade.v1 import assertion_pb2, suite_pb2

KEYS = ("tool_call_args", "expected_tool_sequence", "allowed_tools", "expected_tool_calls")
_A = assertion_pb2
_MODES = {
    "exact": _A.MATCH_MODE_EXACT,
    "subset": _A.MATCH_MODE_SUBSET,
    "partial": _A.MATCH_MODE_PARTIAL,
    "regex": _A.MATCH_MODE_REGEX,
}
_SEQUENCE_MODES = {
    "in_order": _A.SEQUENCE_MODE_IN_ORDER,
    "exact": _A.SEQUENCE_MODE_EXACT,
    "any_order": _A.SEQUENCE_MODE_ANY_ORDER,
}


def looks_like(obj: Any) -> bool:
    """An object with at least one Orbit key."""
    return isinstance(obj, dict) and any(key in obj for key in KEYS)


def convert(obj: dict[str, Any]) -> Conversion:
    """Convert in a fixed order: args checks, the sequence, the allowlist, presence checks."""
    conversion = Conversion(suite_pb2.Suite(name=str(obj.get("name") or "")))
    for key in obj:
        if key not in (*KEYS, "name", "description"):
            conversion.unsupported.append(f"{key}: not an Orbit key")
    assertions = conversion.suite.assertions
    args = obj.get("tool_call_args")
    # A mapping `{tool: expected_args}` is the short form of the list form.
    entries = (
        [{"tool": tool, "args": expected} for tool, expected in args.items()]
        if isinstance(args, dict)
        else args or []
    )
    for index, entry in enumerate(entries):
        where = f"tool_call_args[{index}]"
        problem = _tool_call_args(entry, assertions)
        if problem:
            conversion.unsupported.append(f"{where}: {problem}")
    sequence = obj.get("expected_tool_sequence")
    if sequence is not None:
        problem = _sequence(sequence, assertions)
        if problem:
            conversion.unsupported.append(f"expected_tool_sequence: {problem}")
    allowed = obj.get("allowed_tools")
    if allowed is not None:
        if isinstance(allowed, list) and all(isinstance(t, str) for t in allowed):
            assertions.add(allowed_tools=_A.ToolList(tools=allowed))
        else:
            conversion.unsupported.append("allowed_tools: must be a list of names")
    for index, tool in enumerate(obj.get("expected_tool_calls") or []):
        name = tool.get("tool") if isinstance(tool, dict) else tool
        if isinstance(name, str) and name:
            assertions.add(tool_called=_A.ToolCalled(tool=name))
        else:
            conversion.unsupported.append(f"expected_tool_calls[{index}]: needs a tool name")
    return conversion


def _tool_call_args(entry: Any, assertions: Any) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
        return "needs an object with a tool name"
    mode = str(entry.get("mode", "exact")).lower()
    if mode not in _MODES:
        return f"mode {mode!r}"
    match = _A.ArgsMatch(mode=_MODES[mode])
    if mode == "regex":
        match.pattern = str(entry.get("pattern", ""))
        match.flags = str(entry.get("flags", ""))
    else:
        match.args_json = json_text(entry.get("args", entry.get("arguments", {})))
        match.ignore.extend(entry.get("ignore") or [])
        if entry.get("defaults") is not None:
            match.defaults_json = json_text(entry["defaults"])
    check = _A.ToolCallArgs(tool=entry["tool"], match=match)
    if entry.get("call_index") is not None:
        check.call_index = int(entry["call_index"])
    quantifier = str(entry.get("quantifier", "any")).lower()
    if quantifier not in ("any", "all"):
        return f"quantifier {quantifier!r}"
    check.quantifier = _A.QUANTIFIER_ALL if quantifier == "all" else _A.QUANTIFIER_ANY
    assertions.add(tool_call_args=check)
    return None


def _sequence(value: Any, assertions: Any) -> str | None:
    steps, mode = (value, "in_order") if isinstance(value, list) else (None, None)
    if isinstance(value, dict):
        steps, mode = value.get("steps"), str(value.get("mode", "in_order")).lower()
    if not isinstance(steps, list) or not steps or mode not in _SEQUENCE_MODES:
        return "needs a non-empty list of steps and mode in_order, exact or any_order"
    out = []
    for step in steps:
        if isinstance(step, str):
            out.append(_A.SequenceStep(tool=step))
        elif isinstance(step, dict) and isinstance(step.get("tool"), str):
            made = _A.SequenceStep(tool=step["tool"])
            if "args" in step:
                made.match.mode = _A.MATCH_MODE_EXACT
                made.match.args_json = json_text(step["args"])
            out.append(made)
        else:
            return f"step {step!r} needs a tool name"
    assertions.add(tool_sequence=_A.ToolSequence(steps=out, mode=_SEQUENCE_MODES[mode]))
    return None
