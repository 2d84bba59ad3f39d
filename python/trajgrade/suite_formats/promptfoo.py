"""promptfoo trajectory assertions (`trajectory:*`, `not-trajectory:*`) as a native Suite."""

from __future__ import annotations

import re
from typing import Any

from trajgrade.suite_formats.conversion import Conversion, json_text
from trajgrade.v1 import assertion_pb2, suite_pb2

TYPES = (
    "trajectory:tool-used",
    "trajectory:tool-args-match",
    "trajectory:tool-sequence",
    "trajectory:step-count",
)
_A = assertion_pb2


def looks_like(obj: Any) -> bool:
    """promptfoo assertions, a test, a test-case file (a list of tests), or a config."""
    if is_config(obj) or is_test_list(obj) or (is_test(obj) and "assert" in obj):
        return True
    items = obj.get("assert") if isinstance(obj, dict) else obj
    return isinstance(items, list) and any(
        isinstance(a, dict)
        and str(a.get("type", "")).removeprefix("not-").startswith("trajectory:")
        for a in items
    )


def is_config(obj: Any) -> bool:
    """A promptfooconfig: an object with `tests` or `defaultTest`."""
    return isinstance(obj, dict) and ("tests" in obj or "defaultTest" in obj)


def is_test(obj: Any) -> bool:
    """A promptfoo test case: an object with `assert`, `vars` or `description`, no `type`."""
    return (
        isinstance(obj, dict)
        and "type" not in obj
        and any(k in obj for k in ("assert", "vars", "description"))
    )


def is_test_list(obj: Any) -> bool:
    """A test-case file: a non-empty list of test cases."""
    return isinstance(obj, list) and bool(obj) and all(is_test(t) for t in obj)


def glob(pattern: str) -> str:
    """promptfoo's pattern (only `*` and `?` are special) as our glob: escape `[`, `]`, `\\`."""
    return "".join("\\" + ch if ch in "[]\\" else ch for ch in pattern)


class _UnsupportedError(Exception):
    """A part that cannot be converted; `path` continues the assertion's source path."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


# Keys of a promptfoo assertion object. `weight`, `metric` and `threshold` only feed promptfoo's
# score aggregation, so they are read and ignored; any other key is reported, never dropped.
_ASSERTION_KEYS = ("type", "value", "weight", "metric", "threshold")
_MATCHER_KEYS = ("name", "pattern", "tool", "type")
_VALUE_KEYS = {
    "trajectory:tool-used": (*_MATCHER_KEYS, "min", "max"),
    "trajectory:tool-args-match": (
        *_MATCHER_KEYS,
        "args",
        "arguments",
        "mode",
        "defaults",
        "ignore",
    ),
    "trajectory:tool-sequence": ("mode", "steps"),
    "trajectory:step-count": ("name", "pattern", "type", "min", "max"),
}


def _known_keys(obj: Any, keys: tuple[str, ...], path: str) -> None:
    """An unknown key (a typo such as `mod: exact`) would silently loosen the check: refuse it."""
    if isinstance(obj, dict):
        for key in obj:
            if key not in keys:
                raise _UnsupportedError(
                    f"unknown key; expected {', '.join(keys)}", path=f"{path}.{key}"
                )


def convert(obj: Any) -> Conversion:
    """Convert promptfoo assertions with promptfoo's meaning (see docs/suite-formats.md)."""
    items = obj.get("assert") if isinstance(obj, dict) else obj
    conversion = Conversion(suite_pb2.Suite())
    if isinstance(obj, dict) and isinstance(obj.get("description"), str):
        conversion.suite.name = obj["description"]
    add_assertions(conversion, items, "assert")
    return conversion


def add_assertions(conversion: Conversion, items: Any, where: str) -> None:
    """Append the converted `items` (an `assert` list at source path `where`) to `conversion`."""
    if items is None:
        return
    if not isinstance(items, list):
        conversion.unsupported.append(f"{where}: must be a list of assertions")
        return
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(kind, str):
            conversion.unsupported.append(f"{at}: not an assertion object (no `type`)")
            continue
        negate = kind.startswith("not-")
        base = kind.removeprefix("not-")
        value = item.get("value")
        try:
            if base in _VALUE_KEYS:
                _known_keys(item, _ASSERTION_KEYS, "")
                _known_keys(value, _VALUE_KEYS[base], ".value")
            if base == "trajectory:tool-used":
                made = _tool_used(value, negate)
            elif base == "trajectory:tool-args-match":
                made = [_tool_args_match(value, negate)]
            elif base == "trajectory:tool-sequence":
                made = [_tool_sequence(value, negate)]
            elif base == "trajectory:step-count":
                made = [_step_count(value, negate)]
            elif base == "javascript" and not negate and (budget := token_ceiling(value)):
                _known_keys(item, _ASSERTION_KEYS, "")
                made = [_A.Assertion(budget=budget)]
            else:
                raise _UnsupportedError(_not_graded(kind))
        except _UnsupportedError as exc:
            conversion.unsupported.append(f"{at}{exc.path}: {exc}")
            continue
        conversion.suite.assertions.extend(made)


# promptfoo assertion types that ask a model for a verdict.
_MODEL_GRADED = (
    "trajectory:goal-success",
    "llm-rubric",
    "g-eval",
    "factuality",
    "answer-relevance",
    "context-faithfulness",
    "context-recall",
    "context-relevance",
    "select-best",
    "search-rubric",
    "pi",
)


def _not_graded(kind: str) -> str:
    base = kind.removeprefix("not-")
    if base in _MODEL_GRADED or base.startswith("model-graded-"):
        return f"type {kind!r} is model-graded; trajgrade grades deterministically"
    if base in ("javascript", "python", "ruby", "webhook"):
        return (
            f"type {kind!r} runs user code over promptfoo's spans; not supported (a trajgrade "
            "`expression` assertion can say many such rules)"
        )
    if base == "assert-set":
        return "type 'assert-set' (a weighted group of assertions) is not supported"
    return f"type {kind!r} is not a trajectory check (it grades the output text)"


# The token ceiling of the promptfoo article (and the shape users copy from it): a `javascript`
# assertion that sums span token attributes over `context.trace.spans` and compares the sum
# with a constant. Matched whole, whitespace-insensitive: any other code stays unsupported.
_USAGE_TERM = (
    r"\+\s*Number\(\s*(?P=span)\.attributes\[\s*(?P<quote>['\"])"
    r"gen_ai\.usage\.(?:input|output)_tokens(?P=quote)\s*\]\s*(?:\?\?|\|\|)\s*0\s*\)\s*"
)
_TOKEN_CEILING = re.compile(
    r"^\s*(?:const|let|var)\s+(?P<sum>[A-Za-z_$][\w$]*)\s*=\s*"
    r"context\.trace\.spans\.reduce\(\s*\(\s*(?P<acc>[A-Za-z_$][\w$]*)\s*,\s*"
    r"(?P<span>[A-Za-z_$][\w$]*)\s*\)\s*=>\s*\(?\s*(?P=acc)\s*"
    rf"(?P<terms>(?:{_USAGE_TERM}){{1,2}})\)?\s*,\s*0\s*\)\s*;?\s*"
    r"return\s+(?P=sum)\s*(?P<op><=|<)\s*(?P<limit>\d{1,19})\s*;?\s*$"
)
_USAGE_KEY = re.compile(r"gen_ai\.usage\.(input|output)_tokens")


def token_ceiling(code: Any) -> _A.Budget | None:
    """The `budget` a token-ceiling `javascript` assertion means, or None for other code.

    `used <= N` over input and output tokens is `max_total_tokens: N` (`< N`: N - 1); over
    one of them, `max_input_tokens` / `max_output_tokens`. trajgrade sums the trace's model
    calls, which the OTLP importer makes from exactly those span attributes.
    """
    found = _TOKEN_CEILING.match(code) if isinstance(code, str) else None
    kinds = _USAGE_KEY.findall(found["terms"]) if found else []
    limit = int(found["limit"]) - (1 if found["op"] == "<" else 0) if found else -1
    # The same attribute added twice is not a plain ceiling.
    if not kinds or len(set(kinds)) != len(kinds) or not 0 <= limit < 2**64:
        return None
    if len(kinds) == 2:
        return _A.Budget(max_total_tokens=limit)
    if kinds == ["input"]:
        return _A.Budget(max_input_tokens=limit)
    return _A.Budget(max_output_tokens=limit)


def _matcher(value: Any, what: str) -> str:
    """The name pattern of a promptfoo step matcher (a string, or {name|pattern, type})."""
    pattern: Any
    if isinstance(value, str):
        pattern = value
    elif isinstance(value, dict):
        kinds = value.get("type", "tool")
        if kinds not in ("tool", ["tool"]):
            raise _UnsupportedError(f"{what}: step type {kinds!r} (only tool calls are graded)")
        # `tool` is the key of promptfoo's first trajectory release; `pattern` wins as there.
        pattern = value.get("pattern") or value.get("name") or value.get("tool")
    else:
        pattern = None
    if not isinstance(pattern, str) or not pattern:
        raise _UnsupportedError(f"{what}: needs a name or pattern")
    return pattern


def _count(value: Any, key: str) -> int | None:
    raw = value.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < 2**31:
        raise _UnsupportedError(f"{key} must be an integer from 0 to 2147483647, got {raw!r}")
    return raw


def _tool_used(value: Any, negate: bool) -> list[_A.Assertion]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        patterns = [_matcher(v, "tool-used") for v in value]
        if not patterns:
            raise _UnsupportedError("tool-used needs at least one tool")
        if negate:
            # promptfoo passes the negation only when none of the tools was used.
            tools = _A.ToolList(tools=[glob(p) for p in patterns], ignore_case=True)
            return [_A.Assertion(forbidden_tools=tools)]
        return [
            _A.Assertion(tool_count=_A.ToolCount(glob=glob(p), ignore_case=True, min=1))
            for p in patterns
        ]
    if isinstance(value, dict):
        pattern = _matcher(value, "tool-used")
        low = _count(value, "min")
        high = _count(value, "max")
        # promptfoo's default minimum is 1 even when only `max` is given.
        count = _A.ToolCount(glob=glob(pattern), ignore_case=True, min=1 if low is None else low)
        if high is not None:
            count.max = high
        return [_A.Assertion(tool_count=count, negate=negate)]
    raise _UnsupportedError("tool-used value must be a string, a list or an object")


def _tool_args_match(value: Any, negate: bool) -> _A.Assertion:
    if not isinstance(value, dict):
        raise _UnsupportedError("tool-args-match value must be an object")
    pattern = _matcher(value, "tool-args-match")
    if "args" in value:
        expected = value["args"]
    elif "arguments" in value:
        expected = value["arguments"]
    else:
        raise _UnsupportedError("tool-args-match needs args or arguments")
    mode = value.get("mode", "partial")
    if mode not in ("partial", "exact"):
        raise _UnsupportedError(f"tool-args-match mode {mode!r}")
    match = _A.ArgsMatch(
        mode=_A.MATCH_MODE_PARTIAL if mode == "partial" else _A.MATCH_MODE_EXACT,
        args_json=json_text(expected),
    )
    defaults = value.get("defaults")
    if defaults is not None:
        if not isinstance(defaults, dict):
            raise _UnsupportedError("tool-args-match defaults must be an object")
        match.defaults_json = json_text(defaults)
    ignore = value.get("ignore")
    if ignore is not None and not isinstance(ignore, str | list):
        raise _UnsupportedError(f"tool-args-match ignore must be a key or a list, got {ignore!r}")
    for key in [ignore] if isinstance(ignore, str) else ignore or []:
        if not isinstance(key, str) or not key or any(ch in key for ch in "*?.[]"):
            # promptfoo ignores top-level keys only, `*`/`?` as key globs; our entries are
            # key paths without globs, so only plain keys mean the same thing.
            raise _UnsupportedError(f"tool-args-match ignore entry {key!r}")
        match.ignore.append(key)
    # A one-step sequence gives promptfoo's reading: some call whose name matches the
    # case-insensitive glob has matching arguments (tool_call_args takes exact names).
    step = _A.SequenceStep(glob=glob(pattern), ignore_case=True, match=match)
    return _A.Assertion(
        name=("not-" if negate else "") + f"trajectory:tool-args-match:{pattern}",
        negate=negate,
        tool_sequence=_A.ToolSequence(steps=[step], mode=_A.SEQUENCE_MODE_IN_ORDER),
    )


def _tool_sequence(value: Any, negate: bool) -> _A.Assertion:
    if isinstance(value, list):
        mode, steps = "in_order", value
    elif isinstance(value, dict):
        mode, steps = value.get("mode") or "in_order", value.get("steps") or []
    else:
        raise _UnsupportedError("tool-sequence value must be a list or an object")
    if mode not in ("in_order", "exact"):
        raise _UnsupportedError(f"tool-sequence mode {mode!r}")
    if not steps:
        raise _UnsupportedError("tool-sequence needs at least one step")
    out = []
    for number, step in enumerate(steps, start=1):
        if isinstance(step, list):
            raise _UnsupportedError(f"tool-sequence step {number} is a parallel group (turns)")
        _known_keys(step, _MATCHER_KEYS, f".value.steps[{number - 1}]")
        out.append(_A.SequenceStep(glob=glob(_matcher(step, f"step {number}")), ignore_case=True))
    sequence = _A.ToolSequence(
        steps=out,
        mode=_A.SEQUENCE_MODE_EXACT if mode == "exact" else _A.SEQUENCE_MODE_IN_ORDER,
    )
    return _A.Assertion(tool_sequence=sequence, negate=negate)


def _step_count(value: Any, negate: bool) -> _A.Assertion:
    if not isinstance(value, dict):
        raise _UnsupportedError("step-count value must be an object")
    low = _count(value, "min")
    high = _count(value, "max")
    if low is None and high is None:
        raise _UnsupportedError("step-count needs min or max")
    kinds = value.get("type")
    if kinds is not None and kinds not in ("tool", ["tool"]):
        raise _UnsupportedError(f"step-count type {kinds!r} (only tool calls are graded)")
    pattern = value.get("pattern") or value.get("name")
    if isinstance(pattern, str) and pattern:
        count = _A.ToolCount(glob=glob(pattern), ignore_case=True)
        if low is not None:
            count.min = low
        if high is not None:
            count.max = high
        return _A.Assertion(tool_count=count, negate=negate)
    steps = _A.StepCount()
    if low is not None:
        steps.min = low
    if high is not None:
        steps.max = high
    return _A.Assertion(step_count=steps, negate=negate)
