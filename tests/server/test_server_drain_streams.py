"""Drain over real channels: it ends as soon as accepted work is answered (and says how long it
took), open single-trace streams are answered then ended, not cut, and calls gRPC still held
get UNAVAILABLE, never CANCELLED."""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from trajgrade import _core
from trajgrade.v1 import grader_service_pb2 as g

from .server_harness import SERVICE, Case, GatedGrader, ServerFactory, request_for, status_of


def _drained_seconds(caplog: pytest.LogCaptureFixture) -> float:
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("drained")]
    match = re.match(r"drained in ([0-9.]+)s", line)
    assert match is not None, line
    return float(match.group(1))


async def test_idle_single_trace_stream_is_answered_then_ended_and_drain_does_not_wait(
    make_server: ServerFactory,
    valid_cases: list[Case],
    reference: _core.Grader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = await make_server()
    case = valid_cases[0]
    message = g.StreamGradeTracesRequest(trace=case.trace, suite=case.suite).SerializeToString()
    (expected,) = reference.grade_requests([request_for(case).SerializeToString()])
    keep_open = asyncio.Event()

    async def messages() -> AsyncIterator[bytes]:
        yield message
        yield message
        await keep_open.wait()  # the caller neither sends more nor half-closes

    call = server.raw_stream()(messages())
    answers = [await call.read(), await call.read()]
    assert [g.StreamGradeTracesResponse.FromString(a).outcome.result for a in answers] == [
        g.GradeTraceResponse.FromString(expected).result
    ] * 2
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="trajgrade.server"):
        drained = await server.server.shutdown(grace=10)
    took = time.monotonic() - started
    assert drained
    assert took < 3, took  # not the whole grace period waiting for the idle stream
    assert abs(_drained_seconds(caplog) - took) < 0.5  # the log says how long it really took
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
    keep_open.set()


async def test_stream_messages_in_flight_at_drain_are_all_answered_first(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated)
    cases = valid_cases[:5]
    messages_sent = asyncio.Event()
    keep_open = asyncio.Event()

    async def messages() -> AsyncIterator[bytes]:
        for c in cases:
            yield g.StreamGradeTracesRequest(trace=c.trace, suite=c.suite).SerializeToString()
        messages_sent.set()
        await keep_open.wait()

    gated.gate.clear()
    call = server.raw_stream()(messages())
    await messages_sent.wait()
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    await asyncio.sleep(0.2)  # every message read and queued
    drain = asyncio.create_task(server.server.shutdown(grace=10))
    await asyncio.sleep(0.2)
    gated.gate.set()
    answers = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        while True:
            answers.append(await call.read())
            assert answers[-1] is not grpc.aio.EOF
    expected = [reference.grade_requests([request_for(c).SerializeToString()])[0] for c in cases]
    got = [g.StreamGradeTracesResponse.FromString(a).outcome.result for a in answers]
    assert got == [g.GradeTraceResponse.FromString(e).result for e in expected]  # none cut
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
    assert await drain
    keep_open.set()


def _burst(target: str, request: bytes, n: int, out: list[Any], sent: threading.Event) -> None:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(SERVICE + "GradeTrace")
        futures = [call.future(request, timeout=60) for _ in range(n)]
        sent.set()
        for future in futures:
            try:
                out.append(future.result())
            except grpc.RpcError as error:
                out.append(error)


async def test_short_drain_refuses_calls_grpc_still_holds_with_unavailable(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    request = request_for(valid_cases[0]).SerializeToString()
    # Whether the drain catches calls in gRPC's backlog is a race with the machine's speed (on
    # an idle machine the server can answer the whole burst first): a few bursts, each of
    # which must never see CANCELLED, until one is caught.
    for _ in range(5):
        server = await make_server()
        out: list[Any] = []
        sent = threading.Event()
        thread = threading.Thread(target=_burst, args=(server.target, request, 1500, out, sent))
        thread.start()
        assert await asyncio.to_thread(sent.wait, 30)
        # Drain while most of the burst still waits in gRPC's backlog, not yet taken by a
        # handler.
        assert await server.server.shutdown(grace=1.0)
        await asyncio.to_thread(thread.join, 60)
        codes = collections.Counter("OK" if isinstance(r, bytes) else r.code().name for r in out)
        assert len(out) == 1500
        details = collections.Counter(r.details() for r in out if not isinstance(r, bytes))
        assert set(codes) <= {"OK", "UNAVAILABLE"}, (codes, details)  # never CANCELLED
        if codes["UNAVAILABLE"] > 0:
            return
    pytest.fail(f"no burst of 5 was caught by the drain in gRPC's backlog: {codes}")


async def test_grace_running_out_is_logged_with_the_calls_cut(
    make_server: ServerFactory, valid_cases: list[Case], caplog: pytest.LogCaptureFixture
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated)
    gated.gate.clear()
    held = [asyncio.create_task(server.grade(request_for(c))) for c in valid_cases[:2]]
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    await asyncio.sleep(0.1)
    with caplog.at_level(logging.INFO, logger="trajgrade.server"):
        assert not await server.server.shutdown(grace=0.3)
    gated.gate.set()
    (line,) = [r.getMessage() for r in caplog.records if "ran out" in r.getMessage()]
    assert "(2 calls cut)" in line, line
    assert not any(r.getMessage().startswith("drained") for r in caplog.records)
    for task in held:
        with pytest.raises(grpc.aio.AioRpcError):
            await task
