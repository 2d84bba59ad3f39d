"""What the Rust core grades today, probed once: tests that grade SPEC v2 trace fields expect
a failure (strict xfail) while the core does not see them, and must pass once it does.

On main the core's fast protobuf decoder (rust/core/src/wire.rs) skips the v2 `Trace` and
`ToolCall` fields and the expression kind binds none of them, so an expression sees no
`model_calls`, `agent`, `turn` or `server`; and `budget` / `scope` assertions are rejected at
compile time. Other branches add them.
"""

from __future__ import annotations

import functools

import pytest
import trajgrade
from trajgrade.v1 import result_pb2, trace_pb2


@functools.cache
def reads_v2_trace_fields() -> bool:
    trace = trace_pb2.Trace(
        calls=[trace_pb2.ToolCall(name="a", agent="b", turn=2)],
        model_calls=[trace_pb2.ModelCall(input_tokens=5)],
    )
    expr = 'usage.total_tokens == 5 && calls.all(c, c.agent == "b" && c.turn == 2)'
    suite = trajgrade.compile_suite({"assertions": [{"expression": {"expr": expr}}]})
    [result] = suite.grade(trace).results
    return result.status == result_pb2.ASSERTION_STATUS_PASS


def _compiles(assertion: dict[str, object]) -> bool:
    try:
        trajgrade.compile_suite({"assertions": [assertion]})
    except trajgrade.InvalidSuiteError:
        return False
    return True


@functools.cache
def grades_budget() -> bool:
    return _compiles({"budget": {"max_total_tokens": "1"}}) and reads_v2_trace_fields()


@functools.cache
def grades_per_turn() -> bool:
    return _compiles({"tool_called": {"tool": "a"}, "scope": {"per_turn": True}})


needs_v2_trace_fields = pytest.mark.xfail(
    condition=not reads_v2_trace_fields(),
    reason="the core's Trace decoders or expression bindings skip the SPEC v2 fields",
    strict=True,
)
needs_budget = pytest.mark.xfail(
    condition=not grades_budget(),
    reason="the core rejects budget assertions or skips the v2 trace fields",
    strict=True,
)
needs_per_turn = pytest.mark.xfail(
    condition=not grades_per_turn(),
    reason="the core rejects scope (per_turn)",
    strict=True,
)
