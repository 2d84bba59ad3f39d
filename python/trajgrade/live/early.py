"""Early verdicts (--early-verdicts): an assertion that has already failed on the spans of a run
received so far, and must fail on every completion of that run, is reported before the run
ends (docs/live-grading.md, "Early verdicts").

An assertion is early-capable when its failure is monotone: once it fails on a prefix of the
run's calls (and model calls), adding calls can never make it pass. That holds per kind for
some reason codes only (SPEC §4, §12), so a failure counts as early only with one of them:

| kind | early when | reason codes |
| --- | --- | --- |
| forbidden_tools / allowed_tools | always | FORBIDDEN_TOOL / UNEXPECTED_TOOL |
| tool_count | `max` is set and the count is above it | COUNT_OUT_OF_RANGE, positions > max |
| step_count, efficiency | `max` is set / always | TOO_MANY_STEPS |
| no_repeated_calls | always | REPEATED_CALL |
| tool_call_args | quantifier ALL | NO_MATCHING_CALL, ARGS_INVALID_JSON |
| trajectory_match | mode SUBSET | TRAJECTORY_MISMATCH |
| duration | always | TOO_SLOW |
| budget | always | OVER_BUDGET |

Never early: negated, SOFT (efficiency and no_repeated_calls only when made HARD),
report_only or scoped assertions, and every other kind or code (TOOL_NOT_CALLED, a missing
count below `min`, ARGS_NOT_RECORDED, whose arguments a later span may still supply).

The early-capable assertions of a suite form a sub-suite compiled once, when the routes load;
a partial run is graded against it by the same core as the final grade.

Monotone in the calls, not in the spans: the mapping merges spans into one call once it sees
they are one (an MCP span into the agent's tool span above it, once every span between them is
in), so spans arriving out of order can make a prefix hold more calls than the whole run, and
an early verdict end up `overturned` (tests/live/test_live_early.py shows it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trajgrade import _core
from trajgrade.v1 import assertion_pb2, grader_service_pb2, result_pb2, suite_pb2

log = logging.getLogger("trajgrade.live")

# Reason codes whose failure stays a failure on every longer run, by assertion kind.
MONOTONE: dict[str, frozenset[str]] = {
    "forbidden_tools": frozenset({"FORBIDDEN_TOOL"}),
    "allowed_tools": frozenset({"UNEXPECTED_TOOL"}),
    "tool_count": frozenset({"COUNT_OUT_OF_RANGE"}),
    "step_count": frozenset({"TOO_MANY_STEPS"}),
    "efficiency": frozenset({"TOO_MANY_STEPS"}),
    "no_repeated_calls": frozenset({"REPEATED_CALL"}),
    "tool_call_args": frozenset({"NO_MATCHING_CALL", "ARGS_INVALID_JSON"}),
    "trajectory_match": frozenset({"TRAJECTORY_MISMATCH"}),
    "duration": frozenset({"TOO_SLOW"}),
    "budget": frozenset({"OVER_BUDGET"}),
}
# SPEC §3: these kinds default to SOFT.
_SOFT_BY_DEFAULT = frozenset({"no_repeated_calls", "efficiency", "grounding"})


# Kinds that are early-capable only with some options (the rest: whenever HARD).
_NEEDS: dict[str, Callable[[assertion_pb2.Assertion], bool]] = {
    "tool_count": lambda a: a.tool_count.HasField("max"),
    "step_count": lambda a: a.step_count.HasField("max"),
    "tool_call_args": lambda a: a.tool_call_args.quantifier == assertion_pb2.QUANTIFIER_ALL,
    "trajectory_match": lambda a: a.trajectory_match.mode == assertion_pb2.TRAJECTORY_MODE_SUBSET,
}


def early_capable(assertion: assertion_pb2.Assertion) -> bool:
    """Whether a failure of `assertion` on a partial run can be final (see the module table)."""
    kind = assertion.WhichOneof("kind")
    if kind not in MONOTONE or assertion.negate or assertion.report_only:
        return False
    if assertion.HasField("scope") and assertion.scope != assertion_pb2.Scope():
        return False
    severity = assertion.severity
    if severity == assertion_pb2.SEVERITY_SOFT or (
        severity == assertion_pb2.SEVERITY_UNSPECIFIED and kind in _SOFT_BY_DEFAULT
    ):
        return False
    needs = _NEEDS.get(kind)
    return needs is None or needs(assertion)


@dataclass(frozen=True)
class EarlySuite:
    """The early-capable assertions of one suite, compiled as a suite of their own."""

    suite_id: str  # the whole suite's id: early verdicts are reported under it
    compiled: Any  # _core.CompiledSuite of the sub-suite
    # Per sub-suite assertion: its index in the whole suite, its kind, and tool_count's max.
    index: tuple[int, ...]
    kinds: tuple[str, ...]
    maxes: tuple[int | None, ...]

    def failures(self, outcome: result_pb2.TraceOutcome) -> list[tuple[int, Any]]:
        """(index in the whole suite, AssertionResult) of each final failure in `outcome`."""
        if outcome.WhichOneof("outcome") != "result":
            return []
        out = []
        for i, item in enumerate(outcome.result.results):
            if item.status != result_pb2.ASSERTION_STATUS_FAIL:
                continue
            if item.reason_code not in MONOTONE[self.kinds[i]]:
                continue
            most = self.maxes[i]
            # COUNT_OUT_OF_RANGE is also a count below min; positions are every counted call.
            if most is not None and len(item.positions) <= most:
                continue
            out.append((self.index[i], item))
        return out


def early_suite(grader: _core.Grader, compiled: Any) -> EarlySuite | None:
    """The early sub-suite of a compiled suite (None: no assertion of it can fail early)."""
    suite = suite_pb2.Suite.FromString(compiled.suite_bytes())
    picked = [(i, a) for i, a in enumerate(suite.assertions) if early_capable(a)]
    if not picked:
        return None
    sub = suite_pb2.Suite(name=suite.name, assertions=[a for _, a in picked])
    kinds = tuple(str(a.WhichOneof("kind")) for _, a in picked)
    maxes = tuple(
        a.tool_count.max if kind == "tool_count" else None
        for kind, (_, a) in zip(kinds, picked, strict=True)
    )
    return EarlySuite(
        compiled.suite_id,
        grader.compile_suite(sub.SerializeToString(deterministic=True)),
        tuple(i for i, _ in picked),
        kinds,
        maxes,
    )


class EarlySuites:
    """Sub-suites of the suites registered with RegisterSuite (a route's `suite_id`), made on
    first use and kept by id while the routes in force name it (a file's suite gets its own
    when the routes load): at most one per `suite_id` of the routes file."""

    def __init__(self, grader: _core.Grader) -> None:
        self._grader = grader
        self._by_id: dict[str, EarlySuite | None] = {}
        self._named: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, compiled: Any, named: frozenset[str]) -> EarlySuite | None:
        """`compiled`'s sub-suite; `named`: the registered ids the routes in force name (a
        new set, after a reload, drops the sub-suites of the ids it no longer names)."""
        if named is not self._named:
            self._by_id = {key: sub for key, sub in self._by_id.items() if key in named}
            self._named = named
        suite_id = compiled.suite_id
        if suite_id not in self._by_id:
            try:
                self._by_id[suite_id] = early_suite(self._grader, compiled)
            except _core.TrajgradeError:
                log.exception(
                    "suite %s: no early verdicts (its sub-suite did not compile)", suite_id
                )
                self._by_id[suite_id] = None
        return self._by_id[suite_id]


def response(
    run_key: str, service: str, suite_id: str, graded: result_pb2.GradeResult, item: Any
) -> bytes:
    """The WatchResultsResponse of one early failure: `early` set, and a result holding only
    the failed assertion (verdict FAIL: early-capable assertions are HARD and counted)."""
    result = result_pb2.GradeResult(
        trace_id=graded.trace_id,
        suite_id=suite_id,
        verdict=result_pb2.VERDICT_FAIL,
        score=0.0,
        soft_failures=0,
        results=[item],
        mean_score=0.0,
    )
    message = grader_service_pb2.WatchResultsResponse(
        trace_id=run_key, suite_id=suite_id, service_name=service, early=True, result=result
    )
    return message.SerializeToString()
