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
# Every key ADK's models define (evaluation/eval_set.py, eval_case.py); an unknown key (a typo
# such as `intermediate_dta`) would silently drop expected calls, so it is unsupported.
_SET_KEYS = ("eval_set_id", "name", "description", "eval_cases", "creation_timestamp")
_CASE_KEYS = (
    "eval_id",
    "conversation",
    "conversation_scenario",
    "session_input",
    "creation_timestamp",
    "rubrics",
    "final_session_state",
)
_INVOCATION_KEYS = (
    "invocation_id",
    "user_content",
    "final_response",
    "intermediate_data",
    "creation_timestamp",
    "rubrics",
    "app_details",
)
# IntermediateData or InvocationEvents.
_DATA_KEYS = ("tool_uses", "tool_responses", "intermediate_responses", "invocation_events")
# The legacy `.test.json` (evaluation_constants.py; local_eval_sets_manager.py migrates it).
_TURN_KEYS = (
    "query",
    "expected_tool_use",
    "expected_intermediate_agent_responses",
    "reference",
    "response",
)
_LEGACY_CALL_KEYS = ("tool_name", "tool_input", "mock_tool_output")


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _get(obj: dict[str, Any], snake: str) -> Any:
    """ADK models accept snake_case and their camelCase aliases."""
    return obj.get(snake, obj.get(_camel(snake)))


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _unknown(obj: dict[str, Any], keys: tuple[str, ...], where: str, *, camel: bool) -> list[str]:
    """`path: unknown key; expected ...` for each key not in `keys` (nor their camelCase)."""
    known = {*keys, *(map(_camel, keys) if camel else ())}
    expected = f"unknown key; expected {', '.join(keys)}"
    return [f"{_at(where, str(key))}: {expected}" for key in obj if key not in known]


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
    found, skipped = _sources(obj)
    if eval_id is not None:
        found = [(where, c) for where, c in found if _get(c, "eval_id") == eval_id]
    if len(found) != 1:
        raise SuiteFormatError([f"expected one eval case, found {len(found)}; pass eval_id"])
    where, case = found[0]
    return _case(case, config, where, skipped)


def convert_eval_set(obj: Any, *, config: Any = None) -> dict[str, Conversion]:
    """Every eval case of a set, by eval_id."""
    found, skipped = _sources(obj)
    return {
        str(_get(case, "eval_id") or ""): _case(case, config, where, skipped)
        for where, case in found
    }


def cases(obj: Any) -> list[dict[str, Any]]:
    """The eval cases of a set, a case, or a legacy list."""
    return [case for _, case in _sources(obj)[0]]


def _sources(obj: Any) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Each eval case with its source path, and what around the cases is unsupported."""
    if isinstance(obj, list):
        skipped: list[str] = []
        return [("", _legacy_case(obj, skipped))], skipped
    if isinstance(obj, dict) and _get(obj, "eval_cases") is not None:
        found = _get(obj, "eval_cases")
        if not isinstance(found, list):
            raise SuiteFormatError(["eval_cases: must be a list of eval cases"])
        skipped = _unknown(obj, _SET_KEYS, "", camel=True)
        pairs = []
        for index, case in enumerate(found):
            if isinstance(case, dict):
                pairs.append((f"eval_cases[{index}]", case))
            else:
                skipped.append(f"eval_cases[{index}]: an eval case must be an object (left out)")
        return pairs, skipped
    if isinstance(obj, dict):
        return [("", obj)], []
    return [], []


def _legacy_case(turns: list[Any], skipped: list[str]) -> dict[str, Any]:
    """A legacy `.test.json` list of turns as one eval case, as ADK's migration makes it.

    Problems are named by their path in the list (`[0].expected_tool_use[1].tool_name`). An
    unknown key of a turn is unsupported (added to `skipped`); in a tool use it is an error, as
    is a use without a name: leaving either out would change the expected trajectory.
    """
    problems: list[str] = []
    conversation = []
    for index, turn in enumerate(turns):
        uses = turn.get("expected_tool_use") if isinstance(turn, dict) else None
        if not isinstance(uses, list):
            problems.append(
                f"[{index}].expected_tool_use: must be a list of {{tool_name, tool_input}}"
            )
            continue
        skipped += _unknown(turn, _TURN_KEYS, f"[{index}]", camel=False)
        calls = []
        for number, use in enumerate(uses):
            at = f"[{index}].expected_tool_use[{number}]"
            if not isinstance(use, dict):
                problems.append(f"{at}: a tool use must be an object {{tool_name, tool_input}}")
                continue
            problems += _unknown(use, _LEGACY_CALL_KEYS, at, camel=False)
            name, args = use.get("tool_name"), use.get("tool_input")
            if not isinstance(name, str) or not name:
                problems.append(f"{at}.tool_name: a tool use needs a name, got {name!r}")
            if args is not None and not isinstance(args, dict):
                problems.append(f"{at}.tool_input: must be an object, got {args!r}")
            calls.append({"name": name, "args": args})
        conversation.append({"intermediate_data": {"tool_uses": calls}})
    if problems:
        raise SuiteFormatError(problems)
    return {"eval_id": "", "conversation": conversation}


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


def _tool_uses(
    invocation: dict[str, Any], where: str, unsupported: list[str]
) -> list[tuple[str, Any]]:
    """The expected calls of an invocation, each with its source path."""
    data = _get(invocation, "intermediate_data") or {}
    where = f"{where}.intermediate_data"
    if not isinstance(data, dict):
        raise SuiteFormatError([f"{where}: must be an object"])
    unsupported += _unknown(data, _DATA_KEYS, where, camel=True)
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


def _case(case: dict[str, Any], config: Any, where: str, skipped: list[str]) -> Conversion:
    """One eval case at source path `where`; `skipped`: the unsupported parts around it."""
    unsupported = list(skipped)
    threshold, match_type, ignore_args = _criterion(config, unsupported)
    unsupported += _unknown(case, _CASE_KEYS, where, camel=True)
    conversation = case.get("conversation") or []
    path = _at(where, "conversation")
    if not isinstance(conversation, list):
        raise SuiteFormatError([f"{path}: must be a list of invocations"])
    invocations = []
    for number, invocation in enumerate(conversation):
        at = f"{path}[{number}]"
        if isinstance(invocation, dict):
            unsupported += _unknown(invocation, _INVOCATION_KEYS, at, camel=True)
            invocations.append((at, invocation))
        else:
            unsupported.append(f"{at}: an invocation must be an object (left out)")
    if not invocations:
        raise SuiteFormatError(
            [f"{path}: the eval case has no static conversation (scenarios are not supported)"]
        )
    # ADK scores each invocation (user turn) on its own: with several, each expected call keeps
    # its invocation as its turn and the match runs per turn (SPEC §11 `per_turn`).
    several = len(invocations) > 1
    reference = []
    for turn, (at, invocation) in enumerate(invocations, start=1):
        for call_at, use in _tool_uses(invocation, at, unsupported):
            call = _reference_call(use, call_at)
            if several:
                call.turn = turn
            reference.append(call)
    suite = suite_pb2.Suite(name=str(_get(case, "eval_id") or ""))
    # Per-invocation scores are averaged in ADK; a threshold below 1 over several invocations
    # accepts partial trajectories, which an all-turns-pass check cannot say: it becomes SOFT
    # (its score is still the mean over the turns, ADK's average).
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
    assertion = suite.assertions.add(
        name=METRIC,
        severity=severity,
        trajectory_match=_A.TrajectoryMatch(
            reference=reference,
            mode=_MODES[match_type],
            args=_A.MATCH_MODE_IGNORE if ignore_args else _A.MATCH_MODE_EXACT,
        ),
    )
    if several:
        assertion.scope.per_turn = True
    return Conversion(suite, unsupported)


def _text(content: Any) -> str:
    """The text parts of a google.genai Content (`{role, parts: [{text}]}`), joined."""
    parts = content.get("parts") if isinstance(content, dict) else None
    texts = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts)


def conversation_trace(case: dict[str, Any]) -> trace_pb2.Trace:
    """An eval case's conversation as a Trace: each invocation a turn (`turns[k-1]` its
    `user_content` and `final_response` text), its expected calls with that turn.

    The same shape holds an actual run (the `actual_invocation`s of ADK's eval results), so a
    run ADK recorded can be graded against the converted suite.
    """
    trace = trace_pb2.Trace(id=str(_get(case, "eval_id") or ""))
    conversation = case.get("conversation")
    if not isinstance(conversation, list):
        raise SuiteFormatError(["conversation: must be a list of invocations"])
    invocations = [i for i in conversation if isinstance(i, dict)]
    for turn, invocation in enumerate(invocations, start=1):
        for call_at, use in _tool_uses(invocation, f"conversation[{turn - 1}]", []):
            call = _reference_call(use, call_at)
            call.turn = turn
            trace.calls.append(call)
        answer = _text(_get(invocation, "final_response"))
        trace.turns.add(user_input=_text(_get(invocation, "user_content")), final_answer=answer)
        if answer:
            trace.final_answer = answer
    return trace
