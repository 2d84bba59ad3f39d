"""Hardening over real channels: CEL inputs that crashed the parser, compile-time CEL and enum
checks, the CEL cost limit, the per-trace work limit, and deadlines that reach the core."""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc
import pytest
from google.protobuf import json_format
from trajgrade.server.app import make_grader
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import result_pb2, suite_pb2, trace_pb2

from .server_harness import Harness, ServerFactory, status_of


def _suite(*exprs: str) -> suite_pb2.Suite:
    return json_format.ParseDict(
        {"assertions": [{"expression": {"expr": e}} for e in exprs]}, suite_pb2.Suite()
    )


def _trace(trace_id: str, calls: int) -> trace_pb2.Trace:
    return trace_pb2.Trace(
        id=trace_id,
        calls=[trace_pb2.ToolCall(name="a", arguments_json="{}") for _ in range(calls)],
        final_answer="done",
    )


_GOOD = g.GradeTraceRequest(
    trace=_trace("good", 2), suite=_suite("calls.size() == 2")
).SerializeToString()
# 100^3 iterations: far past the default cost limit of 1,000,000 units.
_THREE_LOOPS = "calls.all(a, calls.all(b, calls.all(c, a.position + b.position > 0)))"
# 100^4 iterations: minutes of work when nothing bounds it.
_FOUR_LOOPS = "calls.all(a, calls.all(b, calls.all(c, calls.all(d, a.position > 0))))"


async def _rejected(server: Harness, suite: suite_pb2.Suite) -> tuple[grpc.StatusCode, str, str]:
    request = g.GradeTraceRequest(trace=_trace("t", 1), suite=suite)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request)
    code, info = status_of(err.value)
    return code, info.reason, info.metadata["field"]


@pytest.mark.parametrize(
    "expr",
    [
        # Parse errors past column 65,535 and 100,000 nested parentheses panicked the parser.
        "answer == '" + "a" * 70_000 + "' ||",
        " " * 65_600 + "1 +",
        "(" * 100_000 + "1" + ")" * 100_000,
        "(" * 30_000 + "1" + ")" * 30_000,
        "answer" + ".a" * 20_000,
        # Unknown names fail at compile time, not on every trace.
        "json(answer) == 1",
        "foo.bar == 1",
    ],
    ids=["long", "past-column", "nested-100k", "nested-30k", "chain", "function", "identifier"],
)
async def test_bad_expressions_are_invalid_argument_with_the_field(
    server: Harness, expr: str
) -> None:
    assert await _rejected(server, _suite(expr)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SUITE",
        "assertions[0].expression.expr",
    )
    # The server is unharmed.
    assert g.GradeTraceResponse.FromString(await server.grade_raw(_GOOD)).result.score == 1.0


@pytest.mark.parametrize(
    ("field", "value", "path", "message"),
    [
        # Before: mode 99 was graded as EXACT, severity 7 as HARD.
        ("mode", 99, "assertions[1].tool_sequence.mode", "unknown SequenceMode 99"),
        ("severity", 7, "assertions[1].severity", "unknown Severity 7"),
    ],
)
async def test_unknown_enum_value_is_invalid_argument(
    server: Harness, field: str, value: int, path: str, message: str
) -> None:
    suite = json_format.ParseDict(
        {
            "assertions": [
                {"tool_called": {"tool": "a"}},
                {"tool_sequence": {"steps": [{"tool": "a"}]}},
            ]
        },
        suite_pb2.Suite(),
    )
    # proto3 enums are open: the wire carries any number.
    if field == "mode":
        suite.assertions[1].tool_sequence.mode = value
    else:
        suite.assertions[1].severity = value
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(g.GradeTraceRequest(trace=_trace("t", 1), suite=suite))
    code, info = status_of(err.value)
    assert (code, info.reason, info.metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SUITE",
        path,
    )
    assert message in (err.value.details() or "")


async def test_an_expensive_expression_fails_quickly_at_the_cost_limit(server: Harness) -> None:
    request = g.GradeTraceRequest(trace=_trace("t", 100), suite=_suite(_THREE_LOOPS))
    answers = []
    for _ in range(2):
        started = time.perf_counter()
        answer = g.GradeTraceResponse.FromString(await server.grade(request))
        assert time.perf_counter() - started < 10
        answers.append(answer)
    (result,) = answers[0].result.results
    assert result.reason_code == "EXPRESSION_ERROR"
    assert result.reason.endswith("could not be evaluated: cost limit of 1000000 exceeded")
    assert answers[0] == answers[1]  # deterministic


async def test_expensive_expressions_do_not_delay_a_good_request(server: Harness) -> None:
    """The reported case: two requests of ~10^7 CEL steps each delayed a good request to 7.9 s.
    The cost limit stops each at 10^6 units, so the good one is answered promptly."""
    # 216^3 ~ 10^7 iterations each, past the default cost limit.
    request = g.GradeTraceRequest(trace=_trace("t", 216), suite=_suite(_THREE_LOOPS))
    expensive = [asyncio.ensure_future(server.grade(request)) for _ in range(2)]
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    answer = g.GradeTraceResponse.FromString(await server.grade_raw(_GOOD))
    assert answer.result.score == 1.0
    assert time.perf_counter() - started < 1.0
    for done in await asyncio.gather(*expensive):
        (result,) = g.GradeTraceResponse.FromString(done).result.results
        assert result.reason.endswith("cost limit of 1000000 exceeded")


async def test_expression_cost_limit_is_a_setting(make_server: ServerFactory) -> None:
    server = await make_server(expression_cost_limit=100)
    request = g.GradeTraceRequest(
        trace=_trace("t", 20), suite=_suite("calls.all(a, calls.all(b, true))")
    )
    (result,) = g.GradeTraceResponse.FromString(await server.grade(request)).result.results
    assert result.reason.endswith("cost limit of 100 exceeded")


async def test_work_limit_fails_that_trace_and_grades_the_others(
    make_server: ServerFactory,
) -> None:
    server = await make_server(max_work_units=1_000)
    suite = json_format.ParseDict(
        {"assertions": [{"tool_called": {"tool": "a"}}, {"no_repeated_calls": {}}]},
        suite_pb2.Suite(),
    )
    batch = g.BatchGradeTracesRequest(
        suite=suite, traces=[_trace("small", 3), _trace("big", 900), _trace("small2", 3)]
    )
    raw = await server.raw_unary("BatchGradeTraces")(batch.SerializeToString())
    outcomes = g.BatchGradeTracesResponse.FromString(raw).outcomes
    assert [o.WhichOneof("outcome") for o in outcomes] == ["result", "error", "result"]
    error: result_pb2.ItemError = outcomes[1].error
    assert (error.trace_id, error.reason_code, error.field) == (
        "big",
        "WORK_LIMIT_EXCEEDED",
        "traces[1]",
    )
    assert error.message == "grading needed more than 1000 work units (limit max_work_units)"
    # The unary form answers INVALID_ARGUMENT with the reason code, as for the other limits.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(g.GradeTraceRequest(trace=_trace("big", 900), suite=suite))
    code, info = status_of(err.value)
    assert (code, info.reason, info.metadata["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "WORK_LIMIT_EXCEEDED",
        "trace",
    )


@pytest.mark.parametrize("rpc", ["GradeTrace", "BatchGradeTraces", "StreamGradeTraces"])
async def test_a_deadline_stops_the_grading_and_frees_the_thread(
    make_server: ServerFactory, rpc: str
) -> None:
    # No cost or work limit to stop it: only the deadline can.
    server = await make_server(expression_cost_limit=10**15, max_work_units=10**15, grade_threads=1)
    suite = _suite(_FOUR_LOOPS)
    if rpc == "GradeTrace":
        payload = g.GradeTraceRequest(trace=_trace("slow", 100), suite=suite).SerializeToString()
    elif rpc == "BatchGradeTraces":
        payload = g.BatchGradeTracesRequest(
            suite=suite, traces=[_trace("slow", 100)] * 2
        ).SerializeToString()
    else:
        chunk = g.StreamGradeTracesRequest(suite=suite, traces=[_trace("slow", 100)] * 2)
        payload = chunk.SerializeToString()

    async def good() -> float:
        started = time.perf_counter()
        answer = g.GradeTraceResponse.FromString(await server.grade_raw(_GOOD))
        assert answer.result.score == 1.0
        return time.perf_counter() - started

    started = time.perf_counter()

    async def call() -> object:
        if rpc == "StreamGradeTraces":
            return [m async for m in server.raw_stream()(iter([payload]), timeout=0.2)]
        return await server.raw_unary(rpc)(payload, timeout=0.2)

    slow = asyncio.ensure_future(call())
    await asyncio.sleep(0.05)
    concurrent = asyncio.ensure_future(good())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await slow
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.perf_counter() - started < 1.0
    assert await concurrent < 1.0
    # The grading thread (the only one) is free again: a new caller is answered promptly.
    assert await good() < 1.0


async def test_a_cancelled_call_stops_its_grading(make_server: ServerFactory) -> None:
    server = await make_server(expression_cost_limit=10**15, max_work_units=10**15, grade_threads=1)
    payload = g.GradeTraceRequest(trace=_trace("slow", 100), suite=_suite(_FOUR_LOOPS))
    call = server.raw_unary("GradeTrace")(payload.SerializeToString())
    await asyncio.sleep(0.2)
    call.cancel()
    started = time.perf_counter()
    answer = g.GradeTraceResponse.FromString(await server.grade_raw(_GOOD, timeout=5))
    assert answer.result.score == 1.0
    assert time.perf_counter() - started < 1.0


def test_limits_come_from_env_and_flags() -> None:
    env = {"TRAJGRADE_MAX_WORK_UNITS": "1234", "TRAJGRADE_EXPRESSION_COST_LIMIT": "99"}
    limits = make_grader(Settings.from_sources(environ=env)).limits
    assert (limits.max_work_units, limits.expression_cost_limit) == (1234, 99)
    default = make_grader(Settings.from_sources(environ={})).limits
    assert (default.max_work_units, default.expression_cost_limit) == (50_000_000, 1_000_000)
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    args = parser.parse_args(["--max-work-units", "7", "--expression-cost-limit", "8"])
    flagged = Settings.from_namespace(args, environ=env)
    assert (flagged.max_work_units, flagged.expression_cost_limit) == (7, 8)
    with pytest.raises(SettingsError, match="max_work_units"):
        Settings.from_sources(environ={"TRAJGRADE_MAX_WORK_UNITS": "0"})
