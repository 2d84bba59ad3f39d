"""The core's front (server/front.py, rust/py/src/grader_front.rs): with live grading on, it
serves the TCP addresses, WatchResults from the core's hub and every other call passed to
grpc.aio on a private socket. Each check runs against the front and against grpc.aio serving
the address itself (--core-front false): the same answers, statuses and error details."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from server.test_server_ops import Pki  # tests/server: the throwaway CA of the TLS tests
from trajgrade.live.watch import Published
from trajgrade.server.status import error_info
from trajgrade.v1 import (
    grader_service_pb2,
    grader_service_pb2_grpc,
    result_pb2,
    suite_pb2,
    trace_pb2,
)

from live.conftest import Live, LiveFactory, Watch, drive, eventually

WATCH = "/trajgrade.v1.GraderService/WatchResults"


def grade_request(calls: int = 1, argument_bytes: int = 2) -> grader_service_pb2.GradeTraceRequest:
    suite = json_format.ParseDict(
        {"assertions": [{"tool_called": {"tool": "search"}}]}, suite_pb2.Suite()
    )
    arguments = '{"q": "' + "x" * argument_bytes + '"}'
    trace = json_format.ParseDict(
        {
            "id": "front",
            "calls": [{"name": "search", "arguments_json": arguments} for _ in range(calls)],
        },
        trace_pb2.Trace(),
    )
    return grader_service_pb2.GradeTraceRequest(trace=trace, suite=suite)


async def refusal(live: Live, request: bytes, **kwargs: object) -> grpc.aio.AioRpcError:
    """A WatchResults call with these request bytes, which must fail: its error."""
    call = live.channel.unary_stream(WATCH)(request, **kwargs)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async for _ in call:
            pass
    return failed.value


def described(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, str, dict[str, str]]:
    info = error_info(error.trailing_metadata())
    assert info is not None, error
    return error.code(), error.details() or "", info.reason, dict(info.metadata)


@pytest.mark.parametrize("front", [True, False], ids=["front", "grpc-aio"])
async def test_watch_and_other_calls_on_the_server_address(
    make_live: LiveFactory, front: bool, tmp_path: Path
) -> None:
    live = await make_live(core_front=front)
    assert (live.server._front is not None) is front
    if front:
        # grpc.aio's own socket: private to this user.
        socket = live.server._front.upstream
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
    # Passed on: a unary call, health, and a large request and answer (flow control).
    stub = live.stub
    small = await stub.GradeTrace(grade_request())
    assert small.result.verdict == result_pb2.VERDICT_PASS
    large = await stub.GradeTrace(grade_request(calls=200, argument_bytes=20_000))
    assert large.result.verdict == result_pb2.VERDICT_PASS
    # A bidirectional stream, message by message.
    one = grade_request()
    requests = [
        grader_service_pb2.StreamGradeTracesRequest(trace=one.trace, suite=one.suite)
        for _ in range(3)
    ]
    streamed = [response async for response in stub.StreamGradeTraces(iter(requests))]
    assert [r.outcome.result.verdict for r in streamed] == [result_pb2.VERDICT_PASS] * 3
    # A deadline too short to grade: the caller's DEADLINE_EXCEEDED, the server unharmed.
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await stub.GradeTrace(grade_request(calls=200, argument_bytes=20_000), timeout=0.0001)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    health = health_pb2_grpc.HealthStub(live.channel)
    checked = await health.Check(
        health_pb2.HealthCheckRequest(service="trajgrade.v1.GraderService")
    )
    assert checked.status == health_pb2.HealthCheckResponse.SERVING

    # Served: live results, as filtered, and the calls counted when they end.
    every = await live.watch()
    # A gzip-compressed request is taken too.
    before = len(live.server.live.hub)
    failing = Watch(
        live.stub.WatchResults(
            grader_service_pb2.WatchResultsRequest(verdicts=[result_pb2.VERDICT_FAIL]),
            compression=grpc.Compression.Gzip,
        )
    )
    live.tasks.append(asyncio.get_running_loop().create_task(failing.read()))
    await eventually(lambda: len(live.server.live.hub) > before, what="the gzip watcher")
    await asyncio.to_thread(
        drive, "grpc", live.grpc_endpoint, tmp_path / "spans.json", 3, "dual-agent"
    )
    graded = await every.wait(6)  # each run against both suites
    await failing.wait(3)  # the strict suite fails every run
    await eventually(lambda: len(live.sink_lines()) >= 6, what="the sink rows")
    rows = [json.loads(line) for line in live.sink_lines()]
    assert sorted((r.trace_id, r.suite_id) for r in graded) == sorted(
        (row["trace_id"], row["suite_id"]) for row in rows
    )
    assert len({r.trace_id for r in graded}) == 3
    assert len(failing.items) == 3
    assert all(r.result.verdict == result_pb2.VERDICT_FAIL for r in failing.items)
    every.call.cancel()
    await eventually(lambda: len(live.server.live.hub) == 1, what="the watcher gone")
    if front:
        live.server._front.count()
    assert live.metric("trajgrade_requests_total", rpc="WatchResults", code="CANCELLED") == 1


async def test_the_front_refuses_as_grpc_aio_does(make_live: LiveFactory) -> None:
    """Bytes that are no WatchResultsRequest, a missing token and a drain: the same status,
    message and ErrorInfo from both."""
    token = "s3cret"
    answers = []
    for front in (True, False):
        live = await make_live(core_front=front, auth_token=token)
        bearer = (("authorization", f"Bearer {token}"),)
        invalid = await refusal(live, b"\xff\xff\xff", metadata=bearer)
        unauthenticated = await refusal(live, b"")
        watch = await asyncio.wait_for(_authorized_watch(live, bearer), 30)
        await live.server.shutdown(grace=2)
        await eventually(lambda watch=watch: watch.done, what="the stream's end")
        assert watch.error is not None, front
        answers.append((described(invalid), described(unauthenticated), described(watch.error)))
    assert answers[0] == answers[1]
    invalid, unauthenticated, drained = answers[0]
    assert drained[:3] == (
        grpc.StatusCode.UNAVAILABLE,
        "the server is shutting down; watch another replica",
        "SHUTTING_DOWN",
    )
    assert invalid[:3] == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "not a WatchResultsRequest: its bytes do not parse (protobuf)",
        "INVALID_REQUEST",
    )
    assert unauthenticated[0] == grpc.StatusCode.UNAUTHENTICATED


async def _authorized_watch(live: Live, bearer: tuple[tuple[str, str], ...]) -> object:
    before = len(live.server.live.hub)
    watch = Watch(live.stub.WatchResults(grader_service_pb2.WatchResultsRequest(), metadata=bearer))
    live.tasks.append(asyncio.get_running_loop().create_task(watch.read()))
    await eventually(lambda: len(live.server.live.hub) > before, what="the watcher")
    return watch


@pytest.mark.parametrize("front", [True, False], ids=["front", "grpc-aio"])
async def test_a_watcher_that_does_not_read_is_cut_and_others_go_on(
    make_live: LiveFactory, front: bool
) -> None:
    """Publishing never waits: a watcher that stops reading falls its queue behind once the
    transport's buffers are full, and is cut with WATCHER_TOO_SLOW; the reading one gets it
    all."""
    live = await make_live(core_front=front, watch_queue_size=4)
    # Not read: the call's messages wait in the transport, then in the watcher's queue.
    stalled = live.stub.WatchResults(grader_service_pb2.WatchResultsRequest())
    await eventually(lambda: len(live.server.live.hub) == 1, what="the stalled watcher")
    reading = await live.watch()
    payload = grader_service_pb2.WatchResultsResponse(
        trace_id="t" * 32, suite_id="weather", completion="c" * 16_000
    ).SerializeToString()
    hub = live.server.live.hub
    sent = 0
    for sent in range(1, 3_001):  # up to 48 MB: beyond any transport's buffers
        hub.publish(Published("weather", result_pb2.VERDICT_PASS, "svc", payload))
        if len(hub) == 1:
            break
        await reading.wait(sent)  # the reader keeps up
    assert len(hub) == 1, "the stalled watcher was never cut"
    assert hub.take_dropped() == 1
    await reading.wait(sent)
    assert not reading.done
    with pytest.raises(grpc.aio.AioRpcError) as cut:
        async for _ in stalled:
            pass
    code, _, reason, _ = described(cut.value)
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "WATCHER_TOO_SLOW")


@pytest.mark.parametrize("front", [True, False], ids=["front", "grpc-aio"])
async def test_the_server_address_keeps_the_server_mtls(
    make_live: LiveFactory, tmp_path: Path, front: bool
) -> None:
    """The front terminates the server's mTLS: a client with its certificate grades and
    watches, one without is refused, as on grpc.aio."""
    (tmp_path / "pki").mkdir()
    pki = Pki(tmp_path / "pki")
    live = await make_live(
        core_front=front,
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca,
    )
    target = f"127.0.0.1:{live.server.ports[0]}"
    hub = live.server.live.hub
    for client_cert, works in ((True, True), (False, False)):
        credentials = pki.channel_credentials(client_cert=client_cert)
        async with grpc.aio.secure_channel(target, credentials) as channel:
            stub = grader_service_pb2_grpc.GraderServiceStub(channel)
            if not works:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.GradeTrace(grade_request(), timeout=5)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                continue
            graded = await stub.GradeTrace(grade_request(), timeout=5)
            assert graded.result.verdict == result_pb2.VERDICT_PASS
            call = stub.WatchResults(grader_service_pb2.WatchResultsRequest())
            await eventually(lambda: len(hub) == 1, what="the watcher over TLS")
            hub.publish(Published("s", result_pb2.VERDICT_PASS, "svc", b"\n\x01t"))
            first = await call.read()
            assert first.trace_id == "t"
            call.cancel()
