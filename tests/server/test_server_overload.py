"""Overload over real channels: a burst reaches our RESOURCE_EXHAUSTED (with retry-after),
never gRPC's CANCELLED; a stream with nothing in flight waits for room instead of failing."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from trajgrade import _core
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.wire import length_delimited

from .server_harness import SERVICE, Case, GatedGrader, ServerFactory, request_for, status_of

BURST = 1500  # the size from which the default gRPC backlog started cancelling calls


def _retry_delay_ms(error: grpc.RpcError) -> int:
    """The google.rpc.RetryInfo delay of a failed call, in milliseconds."""
    raw = dict(error.trailing_metadata())["grpc-status-details-bin"]
    for detail in status_pb2.Status.FromString(raw).details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return int(info.retry_delay.ToMilliseconds())
    raise AssertionError("no RetryInfo in the status")


def _burst(target: str, request: bytes, n: int, out: list[Any]) -> None:
    """n GradeTrace calls issued at once from gRPC's own threads (not the server's loop)."""
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(SERVICE + "GradeTrace")
        futures = [call.future(request, timeout=60) for _ in range(n)]
        for future in futures:
            try:
                out.append(future.result())
            except grpc.RpcError as error:
                out.append(error)


async def test_a_burst_gets_our_resource_exhausted_never_cancelled(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(
        grader=gated, executor_threads=1, max_queue_size=8, retry_after_ms=250
    )
    request = request_for(valid_cases[0]).SerializeToString()
    (expected,) = reference.grade_requests([request])
    gated.gate.clear()  # nothing is graded: the queue fills and stays full
    out: list[Any] = []
    thread = threading.Thread(target=_burst, args=(server.target, request, BURST, out))
    thread.start()
    while thread.is_alive() and len(gated.batches) == 0 and server.server.batcher.depth < 8:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)
    gated.gate.set()
    while thread.is_alive():
        await asyncio.sleep(0.05)
    codes = collections.Counter(
        "OK" if isinstance(r, bytes) else r.code().name
        for r in out  # type: ignore[union-attr]
    )
    assert len(out) == BURST
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes  # no CANCELLED, nothing else
    assert codes["RESOURCE_EXHAUSTED"] > 0, codes
    for result in out:
        if isinstance(result, bytes):
            assert result == expected
            continue
        _, info = status_of(result)
        assert info.reason == "QUEUE_FULL"
        assert info.metadata["retry_after_ms"] == "250"
        assert _retry_delay_ms(result) == 250


async def test_max_concurrent_rpcs_refuses_with_resource_exhausted_instead_of_queueing(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, max_concurrent_rpcs=3, retry_after_ms=400)
    gated.gate.clear()
    held = [asyncio.create_task(server.grade(request_for(valid_cases[i]))) for i in range(3)]
    # The blocker holds the grading thread before anything else is sent (on a loaded machine
    # it can take seconds; the requests after it must find it there).
    assert await asyncio.to_thread(gated.entered.wait, 60)
    await asyncio.sleep(0.1)
    # grpc.aio's own cap would make these wait in gRPC's backlog (and be CANCELLED there).
    for i in range(5):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.grade(request_for(valid_cases[3 + i]), timeout=5)
        code, info = status_of(err.value)
        assert (code, info.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_RPCS")
        assert info.metadata["max_concurrent_rpcs"] == "3"
        assert info.metadata["retry_after_ms"] == "400"
        assert _retry_delay_ms(err.value) == 400
    gated.gate.set()
    for task, case in zip(held, valid_cases, strict=False):
        (expected,) = reference.grade_requests([request_for(case).SerializeToString()])
        assert await task == expected
    # Room again: the next call is served.
    assert (
        await server.grade(request_for(valid_cases[0]))
        == reference.grade_requests([request_for(valid_cases[0]).SerializeToString()])[0]
    )
    text = server.server.metrics.exposition().decode()
    assert 'trajgrade_rejected_items_total{reason="too_many_rpcs"} 5.0' in text


def test_pending_backlog_must_hold_at_least_the_queue() -> None:
    with pytest.raises(SettingsError, match="max_pending_rpcs"):
        Settings.from_sources(environ={}, overrides={"max_queue_size": 100, "max_pending_rpcs": 99})
    with pytest.raises(SettingsError, match="max_concurrent_rpcs"):
        Settings.from_sources(environ={}, overrides={"max_concurrent_rpcs": 0})


async def test_stream_with_nothing_in_flight_waits_for_room_instead_of_failing(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1, max_queue_size=2)
    gated.gate.clear()
    blocker = asyncio.create_task(server.grade(request_for(valid_cases[0])))
    # The blocker holds the grading thread before anything else is sent (on a loaded machine
    # it can take seconds; the requests after it must find it there).
    assert await asyncio.to_thread(gated.entered.wait, 60)
    # One more than the queue holds: the collector holds the next item while it waits for the
    # grading thread.
    # The first alone, taken by the collector before the others come (sent together, more
    # than the queue holds could arrive before the collector runs, and be refused).
    queued = [asyncio.create_task(server.grade(request_for(valid_cases[1])))]
    await asyncio.sleep(0.3)
    queued += [asyncio.create_task(server.grade(request_for(valid_cases[i]))) for i in (2, 3)]
    deadline = time.monotonic() + 30
    while not server.server.batcher.full():
        assert time.monotonic() < deadline, "the queue never filled"
        await asyncio.sleep(0.01)
    case = valid_cases[4]
    message = length_delimited(1, case.trace.SerializeToString()) + length_delimited(
        2, case.suite.SerializeToString()
    )

    async def messages() -> AsyncIterator[bytes]:
        yield message
        yield message

    answers: list[bytes] = []

    async def stream() -> None:
        async for answer in server.raw_stream()(messages()):
            answers.append(bytes(answer))

    streaming = asyncio.create_task(stream())
    await asyncio.sleep(0.5)
    assert not streaming.done()  # paused on the full queue, not failed
    assert answers == []
    gated.gate.set()
    await asyncio.wait_for(streaming, 10)
    (expected,) = reference.grade_requests([request_for(case).SerializeToString()])
    assert answers == [length_delimited(1, expected)] * 2
    await asyncio.gather(blocker, *queued)


async def test_stream_waiting_for_room_ends_unavailable_on_drain(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1, max_queue_size=1)
    gated.gate.clear()
    blocker = asyncio.create_task(server.grade(request_for(valid_cases[0])))
    # The blocker holds the grading thread before anything else is sent (on a loaded machine
    # it can take seconds; the requests after it must find it there).
    assert await asyncio.to_thread(gated.entered.wait, 60)
    # One at a time: the first is taken by the collector (which then waits for the thread),
    # the second fills the queue. Sent together they can both arrive before the collector
    # runs, and the second is refused (queue full) while the first is taken: the queue then
    # never fills (a CI run hung here until pytest's timeout).
    queued = [asyncio.create_task(server.grade(request_for(valid_cases[1])))]
    await asyncio.sleep(0.3)
    queued.append(asyncio.create_task(server.grade(request_for(valid_cases[2]))))
    deadline = time.monotonic() + 30
    while not server.server.batcher.full():
        assert time.monotonic() < deadline, "the queue never filled"
        await asyncio.sleep(0.01)
    case = valid_cases[3]
    message = g.StreamGradeTracesRequest(trace=case.trace, suite=case.suite).SerializeToString()

    async def messages() -> AsyncIterator[bytes]:
        yield message

    call = server.raw_stream()(messages())
    await asyncio.sleep(0.3)
    drain = asyncio.create_task(server.server.shutdown(grace=10))
    await asyncio.sleep(0.2)
    gated.gate.set()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call:
            pass
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
    await asyncio.gather(blocker, *queued)
    assert await drain
