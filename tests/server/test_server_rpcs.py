"""Every GraderService RPC over a real channel, answers compared byte for byte with the library."""

from __future__ import annotations

import grpc
import pytest
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import result_pb2, trace_pb2
from trajgrade.wire import length_delimited

from .server_harness import Case, Harness, ServerFactory, bad_utf8_trace, request_for, status_of


async def test_grade_trace_inline_suite_matches_library(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    for case in valid_cases[:40]:
        request = request_for(case).SerializeToString()
        answer = await server.raw_unary("GradeTrace")(request)
        (expected,) = reference.grade_requests([request])
        assert answer == expected, case.id
        result = g.GradeTraceResponse.FromString(answer).result
        assert result.trace_id == case.trace.id
        assert result_pb2.Verdict.Name(result.verdict) == case.expect["verdict"]


async def test_register_then_grade_by_id_and_get_suite(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case = valid_cases[5]
    registered = await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case.suite))
    compiled = reference.compile_suite(case.suite.SerializeToString())
    assert registered.suite_id == compiled.suite_id
    assert registered.suite_id.startswith("s1-")

    by_id = await server.grade(request_for(case, suite_id=registered.suite_id))
    inline = await server.grade(request_for(case))
    # Same suite content, same id, same result bytes whether inline or registered.
    assert by_id == inline

    fetched = await server.stub.GetSuite(g.GetSuiteRequest(suite_id=registered.suite_id))
    assert fetched.suite == case.suite


async def test_register_is_idempotent_by_content(server: Harness, valid_cases: list[Case]) -> None:
    first = await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=valid_cases[0].suite))
    again = await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=valid_cases[0].suite))
    other = await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=valid_cases[1].suite))
    assert first.suite_id == again.suite_id != other.suite_id


async def test_batch_grades_every_trace_in_order_and_isolates_bad_items(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    server = await make_server(max_calls_per_trace=5)
    limited = _core.Grader(_core.Limits(max_calls_per_trace=5))
    suite = valid_cases[0].suite
    traces = [trace_pb2.Trace(id=f"t{i}", calls=valid_cases[0].trace.calls) for i in range(30)]
    too_many = trace_pb2.Trace(id="too-many", calls=[trace_pb2.ToolCall(name="x")] * 6)
    items = [t.SerializeToString() for t in traces]
    # Item 10: not UTF-8 (only the core can tell); item 11: over the calls limit.
    items[10:10] = [bad_utf8_trace("bad"), too_many.SerializeToString()]
    envelope = g.BatchGradeTracesRequest(suite=suite).SerializeToString()
    envelope += b"".join(length_delimited(3, item) for item in items)

    answer = await server.raw_unary("BatchGradeTraces")(envelope)
    library = bench.grade_traces(limited.compile_suite(suite.SerializeToString()), items)
    assert answer == b"".join(length_delimited(1, outcome) for outcome in library)
    outcomes = g.BatchGradeTracesResponse.FromString(answer).outcomes
    assert len(outcomes) == 32
    assert outcomes[10].WhichOneof("outcome") == "error"
    assert outcomes[10].error.reason_code == "INVALID_TRACE"
    assert outcomes[11].WhichOneof("outcome") == "error"
    assert outcomes[11].error.reason_code == "TOO_MANY_CALLS"
    assert "traces[11]" in outcomes[11].error.field
    graded = [o.result.trace_id for i, o in enumerate(outcomes) if i not in (10, 11)]
    assert graded == [t.id for t in traces]
    # Siblings of the bad items got exactly the single-trace answer.
    single = g.GradeTraceResponse.FromString(
        reference.grade_requests(
            [g.GradeTraceRequest(trace=traces[0], suite=suite).SerializeToString()]
        )[0]
    ).result
    assert outcomes[0].result == single


async def test_batch_by_suite_id(server: Harness, valid_cases: list[Case]) -> None:
    case = valid_cases[3]
    suite_id = (await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case.suite))).suite_id
    response = await server.stub.BatchGradeTraces(
        g.BatchGradeTracesRequest(suite_id=suite_id, traces=[case.trace] * 3)
    )
    assert [o.result.suite_id for o in response.outcomes] == [suite_id] * 3


async def test_stream_results_in_request_order_with_suite_carried_over(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case_a, case_b = valid_cases[0], valid_cases[7]
    id_b = (await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case_b.suite))).suite_id
    messages: list[bytes] = []
    expected: list[bytes] = []
    for i in range(120):
        trace = trace_pb2.Trace(id=f"s{i}", calls=case_a.trace.calls)
        if i == 0:
            msg = g.StreamGradeTracesRequest(trace=trace, suite=case_a.suite).SerializeToString()
        elif i == 60:  # switch suites mid-stream; later messages keep the new one
            msg = g.StreamGradeTracesRequest(trace=trace, suite_id=id_b).SerializeToString()
        else:
            msg = g.StreamGradeTracesRequest(trace=trace).SerializeToString()
        if i == 30:
            msg = length_delimited(1, bad_utf8_trace("s30"))  # a bad item mid-stream
        suite = (
            g.GradeTraceRequest(suite=case_a.suite)
            if i < 60
            else g.GradeTraceRequest(suite_id=id_b)
        )
        full = g.GradeTraceRequest(trace=trace)
        full.MergeFrom(suite)
        expected.append(full.SerializeToString())
        messages.append(msg)

    async def requests():  # type: ignore[no-untyped-def]
        for m in messages:
            yield m

    answers = [bytes(a) async for a in server.raw_stream()(requests())]
    assert len(answers) == 120
    outcomes = [g.StreamGradeTracesResponse.FromString(a).outcome for a in answers]
    assert outcomes[30].WhichOneof("outcome") == "error"
    # grade_requests decodes the whole request, so the core reports the request as undecodable.
    assert outcomes[30].error.reason_code == "INVALID_REQUEST"
    assert outcomes[30].error.trace_id == "s30"
    assert "UTF-8" in outcomes[30].error.message
    for i, outcome in enumerate(outcomes):
        if i == 30:
            continue
        (library,) = reference.grade_requests([expected[i]])
        assert outcome.result == g.GradeTraceResponse.FromString(library).result, i
        assert outcome.result.trace_id == f"s{i}"


async def test_stream_without_suite_is_invalid_argument(
    server: Harness, valid_cases: list[Case]
) -> None:
    async def requests():  # type: ignore[no-untyped-def]
        yield g.StreamGradeTracesRequest(trace=valid_cases[0].trace).SerializeToString()

    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [a async for a in server.raw_stream()(requests())]
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason == "INVALID_REQUEST"
    assert info.metadata["field"] == "suite_ref"


async def test_stream_with_unknown_suite_ends_with_not_found(
    server: Harness, valid_cases: list[Case]
) -> None:
    async def requests():  # type: ignore[no-untyped-def]
        yield g.StreamGradeTracesRequest(
            trace=valid_cases[0].trace, suite_id="s1-nope"
        ).SerializeToString()

    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [a async for a in server.raw_stream()(requests())]
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.NOT_FOUND
    assert info.reason == "SUITE_NOT_FOUND"


async def test_generated_stubs_work_end_to_end(server: Harness, valid_cases: list[Case]) -> None:
    """Clients using ordinary generated stubs see ordinary messages (identity only server-side)."""
    case = valid_cases[2]
    response = await server.stub.GradeTrace(g.GradeTraceRequest(trace=case.trace, suite=case.suite))
    assert response.result.trace_id == case.trace.id
    call = server.stub.StreamGradeTraces(
        iter([g.StreamGradeTracesRequest(trace=case.trace, suite=case.suite)])
    )
    outcomes = [r.outcome async for r in call]
    assert outcomes[0].result == response.result
