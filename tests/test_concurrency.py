"""Concurrency: many clients get the library's exact bytes; health answers while a batch grades."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from server.server_harness import (  # the harness shared with tests/server
    SERVICE,
    Case,
    Harness,
    ServerFactory,
    cases,
    make_server,
    reference,
    request_for,
    valid_cases,
)
from trajgrade import _core
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import suite_pb2, trace_pb2

__all__ = ["cases", "make_server", "reference", "valid_cases"]  # fixtures used by name


@pytest.mark.timeout(120)
async def test_hundreds_of_concurrent_clients_get_the_library_bytes(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    server = await make_server(max_batch_size=32)
    # Half the calls name a registered suite, half send it inline: many distinct suites at once.
    suite_ids = {}
    for case in valid_cases:
        response = await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case.suite))
        suite_ids[case.id] = response.suite_id
    requests: list[bytes] = []
    for i in range(400):
        case = valid_cases[i % len(valid_cases)]
        by_id = suite_ids[case.id] if i % 2 else None
        requests.append(request_for(case, suite_id=by_id).SerializeToString())
    expected = reference.grade_requests(list(requests))
    channels = [grpc.aio.insecure_channel(server.target) for _ in range(8)]
    server.extra_channels.extend(channels)

    async def call(i: int) -> bytes:
        method = channels[i % len(channels)].unary_unary(SERVICE + "GradeTrace")
        return bytes(await method(requests[i], timeout=60))

    answers = await asyncio.gather(*(call(i) for i in range(len(requests))))
    assert len({g.GradeTraceResponse.FromString(a).result.suite_id for a in answers}) > 50
    mismatches = [i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if a != e]
    assert mismatches == []
    # The server really batched: fewer core calls than requests.
    text = server.server.metrics.exposition().decode()
    batches = float(text.split("trajgrade_batch_size_count ")[1].split()[0])
    assert batches < len(requests)


@pytest.mark.timeout(120)
async def test_concurrent_streams_keep_their_own_order(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    server = await make_server(stream_window=16)

    async def one_stream(offset: int) -> None:
        cases = [valid_cases[(offset + k) % len(valid_cases)] for k in range(60)]

        async def messages():  # type: ignore[no-untyped-def]
            for case in cases:
                yield g.StreamGradeTracesRequest(
                    trace=case.trace, suite=case.suite
                ).SerializeToString()

        answers = [bytes(a) async for a in server.raw_stream()(messages())]
        expected = reference.grade_requests([request_for(c).SerializeToString() for c in cases])
        for answer, library in zip(answers, expected, strict=True):
            outcome = g.StreamGradeTracesResponse.FromString(answer).outcome
            assert outcome.result == g.GradeTraceResponse.FromString(library).result

    await asyncio.gather(*(one_stream(17 * s) for s in range(12)))


def _heavy_suite(case: Case, copies: int = 40) -> suite_pb2.Suite:
    """The case's suite with every assertion repeated `copies` times (renamed apart).

    Each trace then costs `copies` times more to grade without growing the message, so a
    batch takes long enough to observe in a release build too, within max_batch_items.
    """
    suite = suite_pb2.Suite(name=f"{case.suite.name}-heavy")
    for k in range(copies):
        for assertion in case.suite.assertions:
            copy = suite.assertions.add()
            copy.CopyFrom(assertion)
            copy.name = f"{assertion.name}#{k}"
    return suite


def _huge_batch(case: Case, reference: _core.Grader, target: float = 1.0) -> tuple[bytes, float]:
    """A BatchGradeTraces request that keeps the core busy about `target` seconds in-process,
    whatever the build (debug or release): the size grows from a few traces until it does."""
    calls = list(case.trace.calls) * max(1, 200 // max(1, len(case.trace.calls)))
    trace = trace_pb2.Trace(id="big", calls=calls)
    suite = _heavy_suite(case)
    count = 4
    while True:
        request = g.BatchGradeTracesRequest(suite=suite, traces=[trace] * count)
        payload = request.SerializeToString()
        started = time.perf_counter()
        reference.grade_batch_request(payload)
        elapsed = time.perf_counter() - started
        if elapsed >= target or count >= 10_000:
            return payload, elapsed
        count = min(10_000, int(count * min(8.0, max(1.5, 1.2 * target / max(elapsed, 1e-3)))))


def _in_flight_core_calls(server: Harness) -> float:
    """The server's trajgrade_in_flight_batches gauge: core calls running right now."""
    for metric in server.server.metrics.in_flight_batches.collect():
        for sample in metric.samples:
            return float(sample.value)
    return 0.0


@pytest.mark.timeout(120)
async def test_health_answers_promptly_while_a_huge_batch_grades(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    """The core releases the GIL, so the event loop keeps serving while it grades.

    With the GIL held, a health check would wait for the whole batch (about a second).
    """
    heavy = max(valid_cases, key=lambda c: len(c.suite.assertions) * max(1, len(c.trace.calls)))
    payload, in_process = await asyncio.to_thread(_huge_batch, heavy, reference)
    assert in_process >= 0.5, f"could not build a batch that takes long enough ({in_process:.2f}s)"
    # Room for the largest batch _huge_batch builds (10,000 traces: up to about 400 MB of
    # results, whatever the build).
    big = 1024 * 1024 * 1024
    server = await make_server(
        max_message_bytes=big,
        channel_options=[
            ("grpc.max_receive_message_length", big),
            ("grpc.max_send_message_length", big),
        ],
    )
    health = health_pb2_grpc.HealthStub(server.channel)
    await health.Check(health_pb2.HealthCheckRequest())  # connection warm

    batch = asyncio.ensure_future(server.raw_unary("BatchGradeTraces")(payload, timeout=100))
    latencies = []
    while not batch.done():
        if _in_flight_core_calls(server) < 1:
            await asyncio.sleep(0.005)  # still arriving, or already answered
            continue
        started = time.perf_counter()
        response = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        elapsed = time.perf_counter() - started
        assert response.status == health_pb2.HealthCheckResponse.SERVING
        # Count it only if the core call was running from before the check until after it.
        if _in_flight_core_calls(server) >= 1:
            latencies.append(elapsed)
        await asyncio.sleep(0.02)
    answer = await batch
    assert len(g.BatchGradeTracesResponse.FromString(answer).outcomes) > 0
    assert len(latencies) >= 5, f"batch finished too fast to observe ({in_process:.2f}s)"
    assert max(latencies) < 0.25 * in_process + 0.1, (max(latencies), in_process)
