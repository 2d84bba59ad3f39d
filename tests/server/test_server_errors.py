"""Every SPEC 7 row: code, ErrorInfo reason and field metadata, over real channels."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from trajgrade import _core
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import trace_pb2

from .server_harness import (
    Case,
    GatedGrader,
    Harness,
    ServerFactory,
    request_for,
    status_of,
)


def _first_invalid(invalid_cases: list[Case], field_prefix: str) -> Case:
    return next(c for c in invalid_cases if c.expect["field"].startswith(field_prefix))


async def test_invalid_suite_register_names_every_problem_with_field_paths(
    server: Harness, invalid_cases: list[Case]
) -> None:
    checked = 0
    for case in invalid_cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case.suite))
        code, info = status_of(err.value)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, case.id
        assert info.reason == "INVALID_SUITE"
        assert info.metadata["field"] == case.expect["field"], case.id
        assert int(info.metadata["problems"]) >= 1
        checked += 1
    assert checked >= 30


async def test_invalid_suite_carries_bad_request_field_violations(
    server: Harness, invalid_cases: list[Case]
) -> None:
    case = _first_invalid(invalid_cases, "assertions[0]")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request_for(case))
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.metadata["field"] == case.expect["field"]
    raw = dict(err.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    violations = error_details_pb2.BadRequest()
    assert any(d.Unpack(violations) for d in status.details)
    assert violations.field_violations[0].field == case.expect["field"]
    assert case.expect["field"] in err.value.details()


async def test_invalid_inline_suite_in_batch_is_invalid_argument(
    server: Harness, invalid_cases: list[Case], valid_cases: list[Case]
) -> None:
    case = invalid_cases[0]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.stub.BatchGradeTraces(
            g.BatchGradeTracesRequest(suite=case.suite, traces=[valid_cases[0].trace])
        )
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_SUITE")
    assert info.metadata["field"] == case.expect["field"]


@pytest.mark.parametrize("rpc", ["GradeTrace", "BatchGradeTraces", "GetSuite"])
async def test_unknown_suite_id_is_not_found(
    server: Harness, valid_cases: list[Case], rpc: str
) -> None:
    trace = valid_cases[0].trace
    request = {
        "GradeTrace": g.GradeTraceRequest(trace=trace, suite_id="s1-unknown"),
        "BatchGradeTraces": g.BatchGradeTracesRequest(suite_id="s1-unknown", traces=[trace]),
        "GetSuite": g.GetSuiteRequest(suite_id="s1-unknown"),
    }[rpc]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary(rpc)(request.SerializeToString())
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.NOT_FOUND
    assert info.reason == "SUITE_NOT_FOUND"
    assert "s1-unknown" in err.value.details()


async def test_oversize_trace_is_invalid_argument_naming_the_limit(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    server = await make_server(max_calls_per_trace=3)
    trace = trace_pb2.Trace(id="big", calls=[trace_pb2.ToolCall(name="f")] * 4)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(g.GradeTraceRequest(trace=trace, suite=valid_cases[0].suite))
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason == "TOO_MANY_CALLS"
    assert info.metadata["field"] == "trace.calls"


async def test_malformed_request_bytes_are_invalid_argument(server: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary("GradeTrace")(b"\xff\xff\xff")
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason == "INVALID_REQUEST"


async def test_message_over_max_message_bytes_is_refused_by_grpc(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    server = await make_server(max_message_bytes=4096)
    trace = trace_pb2.Trace(id="x", final_answer="a" * 10_000)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(g.GradeTraceRequest(trace=trace, suite=valid_cases[0].suite))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_bad_items_do_not_disturb_siblings_in_unary_batches(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    """Good and bad GradeTrace calls coalesced into one core batch each get their own answer."""
    gated = GatedGrader(_core.Grader(_core.Limits(max_calls_per_trace=3)))
    server = await make_server(grader=gated, max_calls_per_trace=3, executor_threads=1)
    small = [c for c in valid_cases if len(c.trace.calls) <= 3][:6]
    gated.gate.clear()
    big = trace_pb2.Trace(id="big", calls=[trace_pb2.ToolCall(name="f")] * 4)
    blocker = asyncio.create_task(server.grade(request_for(small[0])))
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    good = [asyncio.create_task(server.grade(request_for(c))) for c in small[1:6]]
    bad = asyncio.create_task(server.grade(g.GradeTraceRequest(trace=big, suite=small[0].suite)))
    unknown = asyncio.create_task(
        server.grade(g.GradeTraceRequest(trace=small[0].trace, suite_id="s1-none"))
    )
    await asyncio.sleep(0.2)
    gated.gate.set()
    await blocker
    for task, case in zip(good, small[1:6], strict=True):
        (expected,) = gated.inner.grade_requests([request_for(case).SerializeToString()])
        assert await task == expected
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await bad
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await unknown
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    # The seven calls after the blocker went to the core together.
    assert gated.batches[0] == 1
    assert gated.batches[1] == 7


async def test_deadline_passed_in_queue_is_deadline_exceeded_and_never_graded(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1)
    gated.gate.clear()
    blocker = asyncio.create_task(server.grade(request_for(valid_cases[0])))
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request_for(valid_cases[1]), timeout=0.2)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    gated.gate.set()
    await blocker
    await asyncio.sleep(0.05)
    # Only the blocker reached the core: the expired item was dropped before grading.
    assert gated.batches == [1]
    text = server.server.metrics.exposition().decode()
    assert 'trajgrade_dropped_items_total{reason="cancelled"} 1.0' in text or (
        'trajgrade_dropped_items_total{reason="deadline"} 1.0' in text
    )


async def test_queue_full_is_resource_exhausted_and_accepted_work_completes(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1, max_queue_size=4)
    gated.gate.clear()
    calls = [asyncio.create_task(server.grade(request_for(valid_cases[i % 20]))) for i in range(20)]
    await asyncio.sleep(0.5)
    gated.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    ok = [(i, r) for i, r in enumerate(results) if isinstance(r, bytes)]
    refused = [r for r in results if not isinstance(r, bytes)]
    assert refused, "the bounded queue never filled"
    for error in refused:
        assert isinstance(error, grpc.aio.AioRpcError)
        code, info = status_of(error)
        assert (code, info.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUEUE_FULL")
        assert info.metadata["max_queue_size"] == "4"
    # Every accepted call was answered with the library's bytes: nothing accepted was dropped.
    assert len(ok) >= 5
    for i, answer in ok:
        (expected,) = reference.grade_requests(
            [request_for(valid_cases[i % 20]).SerializeToString()]
        )
        assert answer == expected


async def test_unexpected_bug_is_internal_with_generic_message(
    make_server: ServerFactory, valid_cases: list[Case], caplog: pytest.LogCaptureFixture
) -> None:
    gated = GatedGrader(_core.Grader())
    gated.fail_with = RuntimeError("secret detail of a bug")
    server = await make_server(grader=gated)
    with (
        caplog.at_level(logging.ERROR, logger="trajgrade.server"),
        pytest.raises(grpc.aio.AioRpcError) as err,
    ):
        await server.grade(request_for(valid_cases[0]))
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.INTERNAL, "INTERNAL")
    assert "secret" not in err.value.details()
    assert "secret detail of a bug" in caplog.text  # the traceback is in the log only


async def test_new_work_during_drain_is_unavailable(
    server: Harness, valid_cases: list[Case]
) -> None:
    server.server.batcher.close()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request_for(valid_cases[0]))
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
