"""A pure-Python reference model of SPEC §2-§5, §9: compile a suite dict, grade a trace dict.

Inputs are the protobuf JSON mapping as plain dicts (snake_case, enum names), as in the
conformance cases. The output is the comparable part of a GradeResult:
`{"verdict", "score", "soft_failures", "results": [{name, status, severity, reason_code,
positions}]}`. Not modelled: `expression` (CEL) assertions; compiling one raises NotModelledError.
Slow by design: clarity first, it is the oracle for the differential tests and the bench.
"""

# ruff: noqa: PLR0911, PLR0912, PLR0915 -- one function per assertion kind, written to be read
# next to the SPEC tables; splitting them further would make the oracle harder to audit.

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from . import jsonval as jv
from .jsregex import RegexError, compile_glob, compile_js, compile_name

PASS, FAIL = "ASSERTION_STATUS_PASS", "ASSERTION_STATUS_FAIL"
HARD, SOFT = "SEVERITY_HARD", "SEVERITY_SOFT"
SOFT_KINDS = {"no_repeated_calls", "efficiency", "grounding"}
KINDS = [
    "tool_call_args",
    "tool_sequence",
    "allowed_tools",
    "forbidden_tools",
    "tool_called",
    "tool_count",
    "step_count",
    "order",
    "no_repeated_calls",
    "efficiency",
    "grounding",
    "trajectory_match",
    "expression",
]


class InvalidSuiteError(ValueError):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems[0][1])
        self.problems = problems
        self.field = problems[0][0]


class NotModelledError(NotImplementedError):
    """The suite uses an assertion kind the reference does not model (expression)."""


class _ProblemError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# ---------------------------------------------------------------- the trace


@dataclass
class Call:
    position: int
    name: str
    raw_args: str | None
    result: str
    args: Any = None
    category: int = 0  # 0 comparable, 1 invalid JSON, 2 not recorded (SPEC §9.7 ranking)


def load_trace(trace: dict[str, Any]) -> tuple[list[Call], str]:
    calls = []
    for i, c in enumerate(trace.get("calls", [])):
        call = Call(i + 1, c.get("name", ""), c.get("arguments_json"), c.get("result", ""))
        if call.raw_args is None:
            call.category = 2
        else:
            try:
                call.args = jv.parse(call.raw_args)
            except jv.InvalidJsonError:
                call.category = 1
        calls.append(call)
    return calls, trace.get("final_answer", "")


# ---------------------------------------------------------------- argument matchers


@dataclass
class ArgsMatcher:
    mode: str  # EXACT SUBSET PARTIAL REGEX IGNORE
    expected: Any = None
    regex: Any = None
    ignore: list[list[tuple[str, bool]]] = field(default_factory=list)
    defaults: dict[str, Any] | None = None

    def diff(self, actual: Any) -> int:
        """Differences between a comparable call's arguments and the expectation (0 = match)."""
        if self.mode == "IGNORE":
            return 0
        if self.mode == "REGEX":
            return 0 if self.regex.search(jv.canonical(actual)) else 1
        actual, expected = jv.copy(actual), jv.copy(self.expected)
        if self.defaults is not None:
            for k, v in self.defaults.items():
                if isinstance(actual, dict) and k not in actual:
                    actual[k] = jv.copy(v)
                if self.mode == "EXACT" and isinstance(expected, dict) and k not in expected:
                    expected[k] = jv.copy(v)
        for path in self.ignore:
            jv.remove_path(actual, path)
            jv.remove_path(expected, path)
        if self.mode == "EXACT":
            return jv.exact_diff(actual, expected)
        if self.mode == "SUBSET":
            return jv.subset_diff(actual, expected)
        return jv.partial_diff(actual, expected)

    def matches(self, call: Call) -> bool:
        if self.mode == "IGNORE":
            return True
        return call.category == 0 and self.diff(call.args) == 0


def _mode(value: str | int | None, default: str = "EXACT") -> str:
    if not value or value == "MATCH_MODE_UNSPECIFIED":
        return default
    return str(value).removeprefix("MATCH_MODE_")


def _parse_json_field(text: str, where: str) -> Any:
    try:
        return jv.parse(text)
    except jv.InvalidJsonError as exc:
        raise _ProblemError(where, f"not valid JSON: {exc}") from exc


def _compile_paths(paths: list[str], where: str) -> list[list[tuple[str, bool]]]:
    out = []
    for j, p in enumerate(paths):
        try:
            out.append(jv.parse_path(p))
        except ValueError as exc:
            raise _ProblemError(f"{where}[{j}]", str(exc)) from exc
    return out


def compile_args_match(m: dict[str, Any], where: str, allow_ignore: bool) -> ArgsMatcher:
    mode = _mode(m.get("mode"))
    if mode == "IGNORE":
        if not allow_ignore:
            raise _ProblemError(f"{where}.mode", "MATCH_MODE_IGNORE is not valid here")
        for f in ("args_json", "pattern", "flags", "ignore", "defaults_json"):
            if m.get(f):
                raise _ProblemError(f"{where}.{f}", f"{f} is not used by MATCH_MODE_IGNORE")
        return ArgsMatcher("IGNORE")
    if mode == "REGEX":
        if m.get("args_json"):
            raise _ProblemError(f"{where}.args_json", "args_json is not used by MATCH_MODE_REGEX")
        try:
            regex = compile_js(m.get("pattern", ""), m.get("flags", ""))
        except RegexError as exc:
            raise _ProblemError(f"{where}.{exc.field}", str(exc)) from exc
        for f in ("ignore", "defaults_json"):
            if m.get(f):
                raise _ProblemError(f"{where}.{f}", f"{f} is not used by MATCH_MODE_REGEX")
        return ArgsMatcher("REGEX", regex=regex)
    for f in ("pattern", "flags"):
        if m.get(f):
            raise _ProblemError(f"{where}.{f}", f"{f} is only used by MATCH_MODE_REGEX")
    expected = _parse_json_field(m.get("args_json", ""), f"{where}.args_json")
    if mode == "SUBSET" and not isinstance(expected, dict):
        raise _ProblemError(f"{where}.args_json", "MATCH_MODE_SUBSET needs an object")
    ignore = _compile_paths(m.get("ignore", []), f"{where}.ignore")
    defaults = None
    if m.get("defaults_json"):
        defaults = _parse_json_field(m["defaults_json"], f"{where}.defaults_json")
        if not isinstance(defaults, dict):
            raise _ProblemError(f"{where}.defaults_json", "defaults_json must be an object")
    return ArgsMatcher(mode, expected=expected, ignore=ignore, defaults=defaults)


# ---------------------------------------------------------------- names and matchings


def _glob(pattern: str, ignore_case: bool, where: str) -> Any:
    try:
        return compile_glob(pattern, ignore_case)
    except ValueError as exc:
        raise _ProblemError(where, str(exc)) from exc


def _tool_or_glob(spec: dict[str, Any], where: str) -> Any:
    tool, glob, ic = spec.get("tool", ""), spec.get("glob", ""), bool(spec.get("ignore_case"))
    if tool and glob:
        raise _ProblemError(f"{where}.glob", "set tool or glob, not both")
    if not tool and not glob:
        raise _ProblemError(f"{where}.tool", "tool or glob is required")
    return compile_name(tool, ic) if tool else _glob(glob, ic, f"{where}.glob")


def max_matching(adj: list[list[bool]], n_right: int, banned: set[int], lefts: list[int]) -> int:
    match_r: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for r in range(n_right):
            if adj[left][r] and r not in banned and r not in seen:
                seen.add(r)
                if r not in match_r or augment(match_r[r], seen):
                    match_r[r] = left
                    return True
        return False

    return sum(1 for left in lefts if augment(left, set()))


def canonical_matching(adj: list[list[bool]], n_right: int) -> list[int | None]:
    """SPEC §9.13: each left, in order, takes the earliest right still allowing a maximum."""
    n = len(adj)
    best = max_matching(adj, n_right, set(), list(range(n)))
    used: set[int] = set()
    assigned: list[int | None] = []
    fixed = 0
    for left in range(n):
        choice = None
        for r in range(n_right):
            if adj[left][r] and r not in used:
                rest = max_matching(adj, n_right, used | {r}, list(range(left + 1, n)))
                if fixed + 1 + rest == best:
                    choice = r
                    break
        assigned.append(choice)
        if choice is not None:
            used.add(choice)
            fixed += 1
    return assigned


# ---------------------------------------------------------------- assertions

Outcome = tuple[bool, str, list[int]]  # passed, reason_code (on failure), positions
Grader = Callable[[list[Call], str], Outcome]


def _tool_call_args(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    tool = a.get("tool", "")
    if not tool:
        raise _ProblemError(f"{where}.tool", "tool is required")
    index = int(a.get("call_index", 0))
    all_ = a.get("quantifier") in ("QUANTIFIER_ALL", 2)
    if all_ and index:
        raise _ProblemError(f"{where}.quantifier", "QUANTIFIER_ALL with call_index")
    if "match" not in a:
        raise _ProblemError(f"{where}.match", "match is required")
    matcher = compile_args_match(a["match"], f"{where}.match", allow_ignore=False)
    name = f"tool_call_args:{tool}" + (f"#{index}" if index else "")

    def rank(c: Call) -> tuple[int, int, int]:
        return (c.category, matcher.diff(c.args) if c.category == 0 else 0, c.position)

    def failure(c: Call) -> Outcome:
        code = ("NO_MATCHING_CALL", "ARGS_INVALID_JSON", "ARGS_NOT_RECORDED")[c.category]
        return False, code, [c.position]

    def grade(calls: list[Call], answer: str) -> Outcome:
        own = [c for c in calls if c.name == tool]
        if not own:
            return False, "TOOL_NOT_CALLED", []
        if index:
            i = index - 1 if index > 0 else len(own) + index
            if not 0 <= i < len(own):
                return False, "CALL_INDEX_OUT_OF_RANGE", []
            c = own[i]
            return (True, "", [c.position]) if matcher.matches(c) else failure(c)
        if all_:
            failing = [c for c in own if not matcher.matches(c)]
            if not failing:
                return True, "", [c.position for c in own]
            return failure(min(failing, key=rank))
        for c in own:
            if matcher.matches(c):
                return True, "", [c.position]
        return failure(min(own, key=rank))

    return name, grade


def _tool_sequence(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    steps = a.get("steps", [])
    if not steps:
        raise _ProblemError(f"{where}.steps", "at least one step is required")
    compiled = []
    for j, s in enumerate(steps):
        w = f"{where}.steps[{j}]"
        name_re = _tool_or_glob(s, w)
        m = compile_args_match(s["match"], f"{w}.match", True) if "match" in s else None
        compiled.append((name_re, m))
    mode = str(a.get("mode") or "SEQUENCE_MODE_IN_ORDER").removeprefix("SEQUENCE_MODE_")
    mode = "IN_ORDER" if mode == "UNSPECIFIED" else mode

    def ok(step: int, c: Call) -> bool:
        name_re, m = compiled[step]
        return bool(name_re.fullmatch(c.name)) and (m is None or m.matches(c))

    def grade(calls: list[Call], answer: str) -> Outcome:
        n = len(compiled)
        if mode == "IN_ORDER":
            got: list[int] = []
            start = 0
            for step in range(n):
                hit = next((k for k in range(start, len(calls)) if ok(step, calls[k])), None)
                if hit is None:
                    return False, "SEQUENCE_INCOMPLETE", got
                got.append(hit + 1)
                start = hit + 1
            return True, "", got
        if mode == "EXACT":
            for step in range(n):
                if step >= len(calls):
                    return False, "SEQUENCE_INCOMPLETE", list(range(1, step + 1))
                if not ok(step, calls[step]):
                    return False, "SEQUENCE_MISMATCH", list(range(1, step + 1))
            if len(calls) > n:
                return False, "SEQUENCE_MISMATCH", list(range(1, n + 1))
            return True, "", list(range(1, n + 1))
        adj = [[ok(s, c) for c in calls] for s in range(n)]
        assigned = canonical_matching(adj, len(calls))
        if all(x is not None for x in assigned):
            return True, "", [x + 1 for x in assigned if x is not None]
        prefix = []
        for x in assigned:
            if x is None:
                break
            prefix.append(x + 1)
        return False, "SEQUENCE_INCOMPLETE", prefix

    return "tool_sequence", grade


def _tool_list(a: dict[str, Any], where: str, forbidden: bool) -> tuple[str, Grader]:
    tools = a.get("tools", [])
    if forbidden and not tools:
        raise _ProblemError(f"{where}.tools", "at least one tool is required")
    globs = []
    for j, t in enumerate(tools):
        if not t:
            raise _ProblemError(f"{where}.tools[{j}]", "empty tool name")
        globs.append(_glob(t, bool(a.get("ignore_case")), f"{where}.tools[{j}]"))

    def listed(c: Call) -> bool:
        return any(g.fullmatch(c.name) for g in globs)

    def grade(calls: list[Call], answer: str) -> Outcome:
        bad = [c.position for c in calls if listed(c) == forbidden]
        if bad:
            return False, "FORBIDDEN_TOOL" if forbidden else "UNEXPECTED_TOOL", bad
        return True, "", []

    return ("no_forbidden_tool" if forbidden else "no_unexpected_tool"), grade


def _tool_called(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    tool = a.get("tool", "")
    if not tool:
        raise _ProblemError(f"{where}.tool", "tool is required")

    def grade(calls: list[Call], answer: str) -> Outcome:
        first = next((c.position for c in calls if c.name == tool), None)
        return (True, "", [first]) if first else (False, "TOOL_NOT_CALLED", [])

    return f"tool_called:{tool}", grade


def _bounds(a: dict[str, Any], where: str, default_min: int) -> tuple[int, int | None]:
    lo, hi = a.get("min"), a.get("max")
    if lo is None:
        lo = default_min if hi is None else 0
    if hi is not None and int(hi) < int(lo):
        raise _ProblemError(f"{where}.max", "max is below min")
    return int(lo), None if hi is None else int(hi)


def _tool_count(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    name_re = _tool_or_glob(a, where)
    lo, hi = _bounds(a, where, 1)

    def grade(calls: list[Call], answer: str) -> Outcome:
        counted = [c.position for c in calls if name_re.fullmatch(c.name)]
        ok = lo <= len(counted) and (hi is None or len(counted) <= hi)
        return ok, "" if ok else "COUNT_OUT_OF_RANGE", counted

    return f"tool_count:{a.get('tool') or a.get('glob')}", grade


def _step_count(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    if a.get("min") is None and a.get("max") is None:
        raise _ProblemError(where, "min or max is required")
    lo, hi = _bounds(a, where, 0)

    def grade(calls: list[Call], answer: str) -> Outcome:
        if hi is not None and len(calls) > hi:
            return False, "TOO_MANY_STEPS", []
        if len(calls) < lo:
            return False, "COUNT_OUT_OF_RANGE", []
        return True, "", []

    return "step_count", grade


def _order(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    before, after = a.get("before", ""), a.get("after", "")
    if not before:
        raise _ProblemError(f"{where}.before", "before is required")
    if not after:
        raise _ProblemError(f"{where}.after", "after is required")
    if before == after:
        raise _ProblemError(f"{where}.after", "before and after are the same tool")

    def grade(calls: list[Call], answer: str) -> Outcome:
        seen = False
        for c in calls:
            if c.name == after and not seen:
                return False, "ORDER_VIOLATED", [c.position]
            seen = seen or c.name == before
        return True, "", []

    return f"order:{before}->{after}", grade


def _no_repeated_calls(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    tools = a.get("tools", [])
    for j, t in enumerate(tools):
        if not t:
            raise _ProblemError(f"{where}.tools[{j}]", "empty tool name")
    limit = int(a.get("max_identical", 0)) or 1

    def grade(calls: list[Call], answer: str) -> Outcome:
        groups: list[list[Call]] = []
        for c in calls:
            if (tools and c.name not in tools) or c.category != 0:
                continue
            for g in groups:
                if g[0].name == c.name and jv.deep_eq(g[0].args, c.args):
                    g.append(c)
                    break
            else:
                groups.append([c])
        bad = sorted(c.position for g in groups if len(g) > limit for c in g[1:])
        return (False, "REPEATED_CALL", bad) if bad else (True, "", [])

    return "no_repeated_calls", grade


def _efficiency(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    ref = int(a.get("reference_steps", 0))
    if ref <= 0:
        raise _ProblemError(f"{where}.reference_steps", "reference_steps must be positive")
    ratio = float(a.get("max_ratio", 0))
    if not math.isfinite(ratio) or ratio < 0:
        raise _ProblemError(f"{where}.max_ratio", "max_ratio must be a finite non-negative number")
    bound = (ratio or 1.5) * ref

    def grade(calls: list[Call], answer: str) -> Outcome:
        return (True, "", []) if len(calls) <= bound else (False, "TOO_MANY_STEPS", [])

    return "efficiency", grade


_NUMBER_TOKEN = __import__("re").compile(r"[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?")


def _json_leaves(v: Any, strings: list[str], numbers: list[Decimal]) -> None:
    if isinstance(v, str):
        strings.append(v)
    elif isinstance(v, Decimal):
        numbers.append(v)
    elif isinstance(v, list):
        for x in v:
            _json_leaves(x, strings, numbers)
    elif isinstance(v, dict):
        for x in v.values():
            _json_leaves(x, strings, numbers)


def _grounding(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    values, numbers = a.get("values", []), bool(a.get("numbers"))
    if not values and not numbers:
        raise _ProblemError(where, "values or numbers is required")
    for j, v in enumerate(values):
        if not v:
            raise _ProblemError(f"{where}.values[{j}]", "empty value")

    def tokens(text: str) -> list[Decimal]:
        return [Decimal(t.replace(",", "")) for t in _NUMBER_TOKEN.findall(text)]

    def grade(calls: list[Call], answer: str) -> Outcome:
        texts: list[str] = []
        nums: list[Decimal] = []
        for c in calls:
            if not c.result:
                continue
            texts.append(c.result)
            nums.extend(tokens(c.result))
            with contextlib.suppress(jv.InvalidJsonError):
                _json_leaves(jv.parse(c.result), texts, nums)
        for v in values:
            if v in answer and not any(v in t for t in texts):
                return False, "UNGROUNDED_VALUE", []
        if numbers:
            for n in tokens(answer):
                if not any(n == m for m in nums):
                    return False, "UNGROUNDED_VALUE", []
        return True, "", []

    return "grounding", grade


def _trajectory_match(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    refs = a.get("reference", [])
    if not refs:
        raise _ProblemError(f"{where}.reference", "at least one reference call is required")
    base = _mode(a.get("args"))
    if base == "REGEX":
        raise _ProblemError(f"{where}.args", "REGEX is not a trajectory args mode")
    overrides: dict[str, tuple[str, list[list[tuple[str, bool]]]]] = {}
    for j, o in enumerate(a.get("overrides", [])):
        w = f"{where}.overrides[{j}]"
        tool = o.get("tool", "")
        if not tool:
            raise _ProblemError(f"{w}.tool", "tool is required")
        if tool in overrides:
            raise _ProblemError(f"{w}.tool", "duplicate override")
        mode = _mode(o.get("args"), base)
        if mode == "REGEX":
            raise _ProblemError(f"{w}.args", "REGEX is not a trajectory args mode")
        overrides[tool] = (mode, _compile_paths(o.get("ignore", []), f"{w}.ignore"))
    matchers: list[tuple[str, ArgsMatcher | None]] = []
    for j, r in enumerate(refs):
        w = f"{where}.reference[{j}]"
        name = r.get("name", "")
        if not name:
            raise _ProblemError(f"{w}.name", "a reference call needs a name")
        mode, ignore = overrides.get(name, (base, []))
        if "arguments_json" not in r or mode == "IGNORE":
            matchers.append((name, None))
            continue
        expected = _parse_json_field(r["arguments_json"], f"{w}.arguments_json")
        if mode == "SUBSET" and not isinstance(expected, dict):
            raise _ProblemError(f"{w}.arguments_json", "SUBSET args need an object")
        matchers.append((name, ArgsMatcher(mode, expected=expected, ignore=ignore)))
    mode = str(a.get("mode") or "TRAJECTORY_MODE_STRICT").removeprefix("TRAJECTORY_MODE_")
    mode = "STRICT" if mode == "UNSPECIFIED" else mode

    def ok(j: int, c: Call) -> bool:
        name, m = matchers[j]
        return c.name == name and (m is None or m.matches(c))

    def grade(calls: list[Call], answer: str) -> Outcome:
        n = len(matchers)
        if mode == "STRICT":
            bad = [c.position for j, c in enumerate(calls) if j >= n or not ok(j, c)]
            if not bad and len(calls) == n:
                return True, "", [c.position for c in calls]
            return False, "TRAJECTORY_MISMATCH", bad
        if mode == "IN_ORDER":
            used: list[int] = []
            start = 0
            for j in range(n):
                hit = next((k for k in range(start, len(calls)) if ok(j, calls[k])), None)
                if hit is None:
                    rest = [c.position for c in calls if c.position not in used]
                    return False, "TRAJECTORY_MISMATCH", rest
                used.append(hit + 1)
                start = hit + 1
            return True, "", used
        adj = [[ok(j, c) for c in calls] for j in range(n)]
        assigned = canonical_matching(adj, len(calls))
        matched = {x for x in assigned if x is not None}
        need_refs = mode in ("SUPERSET", "UNORDERED")
        need_calls = mode in ("SUBSET", "UNORDERED")
        passed = (not need_refs or len(matched) == n) and (
            not need_calls or len(matched) == len(calls)
        )
        if passed:
            return True, "", [x + 1 for x in assigned if x is not None]
        return (
            False,
            "TRAJECTORY_MISMATCH",
            [c.position for c in calls if c.position - 1 not in matched],
        )

    return "trajectory_match", grade


def _expression(a: dict[str, Any], where: str) -> tuple[str, Grader]:
    raise NotModelledError("expression (CEL) assertions are not modelled by the reference")


_BUILDERS: dict[str, Callable[[dict[str, Any], str], tuple[str, Grader]]] = {
    "tool_call_args": _tool_call_args,
    "tool_sequence": _tool_sequence,
    "allowed_tools": lambda a, w: _tool_list(a, w, forbidden=False),
    "forbidden_tools": lambda a, w: _tool_list(a, w, forbidden=True),
    "tool_called": _tool_called,
    "tool_count": _tool_count,
    "step_count": _step_count,
    "order": _order,
    "no_repeated_calls": _no_repeated_calls,
    "efficiency": _efficiency,
    "grounding": _grounding,
    "trajectory_match": _trajectory_match,
    "expression": _expression,
}


@dataclass
class CompiledAssertion:
    name: str
    severity: str
    negate: bool
    grade: Grader


@dataclass
class Suite:
    assertions: list[CompiledAssertion]

    def grade(self, trace: dict[str, Any]) -> dict[str, Any]:
        calls, answer = load_trace(trace)
        results = []
        for a in self.assertions:
            passed, code, positions = a.grade(calls, answer)
            if a.negate and code != "EXPRESSION_ERROR":
                passed, code = (False, "NEGATED_HELD") if passed else (True, "")
            results.append(
                {
                    "name": a.name,
                    "status": PASS if passed else FAIL,
                    "severity": a.severity,
                    "reason_code": "" if passed else code,
                    "positions": positions,
                }
            )
        passing = sum(r["status"] == PASS for r in results)
        hard_fail = any(r["status"] == FAIL and r["severity"] == HARD for r in results)
        return {
            "verdict": "VERDICT_FAIL" if hard_fail else "VERDICT_PASS",
            "score": passing / len(results),
            "soft_failures": sum(r["status"] == FAIL and r["severity"] == SOFT for r in results),
            "results": results,
        }


def compile_suite(suite: dict[str, Any]) -> Suite:
    """Validates and compiles; raises InvalidSuiteError (all problems) or NotModelledError."""
    items = suite.get("assertions", [])
    if not items:
        raise InvalidSuiteError([("assertions", "a suite needs at least one assertion")])
    problems: list[tuple[str, str]] = []
    compiled = []
    for i, a in enumerate(items):
        where = f"assertions[{i}]"
        kinds = [k for k in KINDS if k in a]
        if len(kinds) != 1:
            problems.append((f"{where}.kind", "exactly one assertion kind is required"))
            continue
        kind = kinds[0]
        try:
            default_name, grade = _BUILDERS[kind](a[kind], f"{where}.{kind}")
        except _ProblemError as p:
            problems.append((p.field, str(p)))
            continue
        negate = bool(a.get("negate"))
        name = a.get("name") or (f"not:{default_name}" if negate else default_name)
        sev = a.get("severity") or "SEVERITY_UNSPECIFIED"
        if sev in ("SEVERITY_UNSPECIFIED", 0):
            sev = SOFT if kind in SOFT_KINDS else HARD
        sev = {1: HARD, 2: SOFT}.get(sev, sev)
        compiled.append(CompiledAssertion(name, str(sev), negate, grade))
    if problems:
        raise InvalidSuiteError(problems)
    return Suite(compiled)
