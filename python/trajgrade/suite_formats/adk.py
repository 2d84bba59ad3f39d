"""Google ADK eval sets and eval configs (`tool_trajectory_avg_score`) as trajectory_match."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from trajgrade.suite_formats.conversion import Conversion, SuiteFormatError, json_text
from trajgrade.v1 import assertion_pb2, suite_pb2, trace_pb2

METRIC = "tool_trajectory_avg_score"
_A = assertion_pb2
_MODES = {
    "EXACT": _A.TRAJECTORY_MODE_STRICT,
    "IN_ORDER": _A.TRAJECTORY_MODE_IN_ORDER,
    # ADK's ANY_ORDER: every expected call matched by a distinct actual call, extras allowed.
    "ANY_ORDER": _A.TRAJECTORY_MODE_SUPERSET,
}
# The keys of google.genai's FunctionCall (snake_case or camelCase). `partial_args` and
# `will_continue` describe streaming, not the call; any other key is refused, never dropped.
_CALL_KEYS = frozenset(
    {"id", "name", "args", "partial_args", "partialArgs", "will_continue", "willContinue"}
)


def _get(obj: dict[str, Any], snake: str) -> Any:
    """ADK models accept snake_case and their camelCase aliases."""
    head, *rest = snake.split("_")
    camel = head + "".join(part.title() for part in rest)
    return obj.get(snake, obj.get(camel))


def looks_like(obj: Any) -> bool:
    """An ADK eval set, eval case, eval config, or a legacy `.test.json` list."""
    if isinstance(obj, dict):
        return any(_get(obj, k) is not None for k in ("eval_cases", "eval_set_id", "criteria")) or (
            _get(obj, "eval_id") is not None and "conversation" in obj
        )
    return (
        isinstance(obj, list)
        and bool(obj)
        and all(isinstance(e, dict) and "expected_tool_use" in e for e in obj)
    )


def convert(obj: Any, *, config: Any = None, eval_id: str | None = None) -> Conversion:
    """One eval case (picked by `eval_id` when the set has several) with the config's criteria."""
    if isinstance(obj, dict) and _get(obj, "criteria") is not None and config is None:
        raise SuiteFormatError(
            [
                "an ADK eval config has criteria but no expected tool calls; convert the eval set "
                "and pass the config as config="
            ]
        )
    found = cases(obj)
    if eval_id is not None:
        found = [c for c in found if _get(c, "eval_id") == eval_id]
    if len(found) != 1:
        raise SuiteFormatError([f"expected one eval case, found {len(found)}; pass eval_id"])
    return _case(found[0], config)


def convert_eval_set(obj: Any, *, config: Any = None) -> dict[str, Conversion]:
    """Every eval case of a set, by eval_id."""
    return {str(_get(case, "eval_id") or ""): _case(case, config) for case in cases(obj)}


def cases(obj: Any) -> list[dict[str, Any]]:
    """The eval cases of a set, a case, or a legacy list."""
    if isinstance(obj, list):
        # Legacy `.test.json`: a list of turns is one eval case, as ADK's migration makes it.
        turns = []
        for index, turn in enumerate(obj):
            uses = turn.get("expected_tool_use") if isinstance(turn, dict) else None
            if not isinstance(uses, list) or not all(isinstance(u, dict) for u in uses):
                raise SuiteFormatError(
                    [f"[{index}].expected_tool_use: must be a list of {{tool_name, tool_input}}"]
                )
            calls = [{"name": u.get("tool_name"), "args": u.get("tool_input")} for u in uses]
            turns.append({"intermediate_data": {"tool_uses": calls}})
        return [{"eval_id": "", "conversation": turns}]
    if isinstance(obj, dict) and _get(obj, "eval_cases") is not None:
        found = _get(obj, "eval_cases")
        if not isinstance(found, list):
            raise SuiteFormatError(["eval_cases: must be a list of eval cases"])
        return [c for c in found if isinstance(c, dict)]
    if isinstance(obj, dict):
        return [obj]
    return []


def _criterion(config: Any, unsupported: list[str]) -> tuple[float, str, bool]:
    if config is None:
        # ADK's default config: tool_trajectory_avg_score 1.0 (response_match_score is a
        # text metric, out of scope here, so it is not reported as unsupported).
        return 1.0, "EXACT", False
    criteria = _get(config, "criteria") if isinstance(config, dict) else None
    if not isinstance(criteria, dict) or METRIC not in criteria:
        raise SuiteFormatError([f"the config has no {METRIC} criterion"])
    for metric in criteria:
        if metric != METRIC:
            unsupported.append(f"criteria.{metric}: not a tool trajectory metric")
    value = criteria[METRIC]
    raw = _get(value, "threshold") if isinstance(value, dict) else value
    if isinstance(raw, bool) or not isinstance(raw, int | float | Decimal | None):
        raise SuiteFormatError([f"criteria.{METRIC}.threshold: must be a number, got {raw!r}"])
    threshold = float(raw or 0.0)
    if isinstance(value, dict):
        match_type = str(_get(value, "match_type") or "EXACT")
        ignore_args = bool(_get(value, "ignore_args"))
    else:
        match_type, ignore_args = "EXACT", False
    match_type = match_type.strip().upper().replace("-", "_").replace(" ", "_")
    if match_type not in _MODES:
        raise SuiteFormatError([f"criteria.{METRIC}.match_type: {match_type!r}"])
    return threshold, match_type, ignore_args


def _tool_uses(invocation: dict[str, Any], where: str) -> list[tuple[str, Any]]:
    """The expected calls of an invocation, each with its source path."""
    data = _get(invocation, "intermediate_data") or {}
    where = f"{where}.intermediate_data"
    if not isinstance(data, dict):
        raise SuiteFormatError([f"{where}: must be an object"])
    uses = _get(data, "tool_uses")
    if uses is not None:
        if not isinstance(uses, list):
            raise SuiteFormatError([f"{where}.tool_uses: must be a list"])
        return [(f"{where}.tool_uses[{i}]", use) for i, use in enumerate(uses)]
    events = _get(data, "invocation_events") or []
    if not isinstance(events, list):
        raise SuiteFormatError([f"{where}.invocation_events: must be a list"])
    out = []
    for e, event in enumerate(events):
        content = event.get("content") if isinstance(event, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for p, part in enumerate(parts if isinstance(parts, list) else []):
            call = _get(part, "function_call") if isinstance(part, dict) else None
            if call is not None:
                at = f"{where}.invocation_events[{e}].content.parts[{p}].function_call"
                out.append((at, call))
    return out


def _reference_call(use: Any, where: str) -> trace_pb2.ToolCall:
    """One expected call; a typo such as `arguments` for `args` would silently expect none."""
    if not isinstance(use, dict):
        raise SuiteFormatError([f"{where}: a tool call must be an object"])
    unknown = [key for key in use if key not in _CALL_KEYS]
    if unknown:
        expected = "unknown key; expected id, name, args"
        raise SuiteFormatError([f"{where}.{key}: {expected}" for key in unknown])
    name = use.get("name")
    if not isinstance(name, str) or not name:
        raise SuiteFormatError([f"{where}.name: a tool call needs a name, got {name!r}"])
    call = trace_pb2.ToolCall(name=name)
    if use.get("args") is not None:
        call.arguments_json = json_text(use["args"])
    return call


def _case(case: dict[str, Any], config: Any) -> Conversion:
    unsupported: list[str] = []
    threshold, match_type, ignore_args = _criterion(config, unsupported)
    conversation = case.get("conversation") or []
    if not isinstance(conversation, list):
        raise SuiteFormatError(["conversation: must be a list of invocations"])
    invocations = [i for i in conversation if isinstance(i, dict)]
    if not invocations:
        raise SuiteFormatError(
            ["the eval case has no static conversation (scenarios are not supported)"]
        )
    reference = []
    for number, invocation in enumerate(invocations):
        for where, use in _tool_uses(invocation, f"conversation[{number}]"):
            reference.append(_reference_call(use, where))
    suite = suite_pb2.Suite(name=str(_get(case, "eval_id") or ""))
    # Per-invocation scores are averaged in ADK; a threshold below 1 over several invocations
    # accepts partial trajectories, which one pass/fail check cannot say: it becomes SOFT.
    severity = (
        _A.SEVERITY_HARD
        if threshold >= 1.0 or (len(invocations) == 1 and threshold > 0.0)
        else _A.SEVERITY_SOFT
    )
    if not reference:
        # Nothing expected: EXACT means no call at all; the other types always pass.
        steps = _A.StepCount(max=0) if match_type == "EXACT" else _A.StepCount(min=0)
        suite.assertions.add(name=METRIC, severity=severity, step_count=steps)
        return Conversion(suite, unsupported)
    suite.assertions.add(
        name=METRIC,
        severity=severity,
        trajectory_match=_A.TrajectoryMatch(
            reference=reference,
            mode=_MODES[match_type],
            args=_A.MATCH_MODE_IGNORE if ignore_args else _A.MATCH_MODE_EXACT,
        ),
    )
    return Conversion(suite, unsupported)
