"""The client's retry rule against real servers: RESOURCE_EXHAUSTED for lack of capacity is
retried no sooner than the server's retry-after; CANCELLED only when no handler answered."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
import trajgrade
from google.rpc import code_pb2, status_pb2
from trajgrade.client import (
    NO_RETRY,
    AsyncClient,
    CancelledError,
    Client,
    ResourceExhaustedError,
    RetryPolicy,
    lost_status,
    retryable,
)
from trajgrade.traces import trace_bytes
from trajgrade.wire import length_delimited

from .conftest import SUITE, trace
from .test_client import SlowGrader, expected

FAST_RETRY = RetryPolicy(max_attempts=10, initial_backoff=0.02, max_backoff=0.05)


def _hold_one_call(server: Any, slow: SlowGrader) -> threading.Thread:
    """A call parked at the grader's gate, filling the server's only call slot."""

    def park() -> None:
        with Client(server.target, timeout=20) as parked:
            parked.grade(trace("parked"), SUITE)

    thread = threading.Thread(target=park)
    thread.start()
    assert slow.entered.wait(10)
    return thread


def test_too_many_rpcs_is_retried_no_sooner_than_retry_after(make_server: Any) -> None:
    slow = SlowGrader()
    server = make_server(grader=slow, max_concurrent_rpcs=1, retry_after_ms=600)
    with Client(server.target, timeout=20, retry=FAST_RETRY) as client:
        client.register_suite(SUITE)
        parked = _hold_one_call(server, slow)
        opened = threading.Timer(0.1, slow.gate.set)
        opened.start()
        started = time.monotonic()
        assert client.grade(trace("t"), SUITE) == expected(trace("t"))[0]
        waited = time.monotonic() - started
        parked.join(10)
        opened.join()
    # The back-off alone (at most 50 ms) would have retried within 0.1 s, while the slot was
    # still taken; the server said 600 ms, and the one retry then succeeded.
    assert waited >= 0.6, waited
    assert server.answered("GradeTrace", "RESOURCE_EXHAUSTED") == 1
    assert server.answered("GradeTrace") == 2


async def test_async_client_honours_retry_after_too(make_server: Any) -> None:
    slow = SlowGrader()
    server = make_server(grader=slow, max_concurrent_rpcs=1, retry_after_ms=500)
    async with AsyncClient(server.target, timeout=20, retry=FAST_RETRY) as client:
        await client.register_suite(SUITE)
        parked = _hold_one_call(server, slow)
        threading.Timer(0.1, slow.gate.set).start()
        started = time.monotonic()
        assert await client.grade(trace("t"), SUITE) == expected(trace("t"))[0]
        assert time.monotonic() - started >= 0.5
        parked.join(10)
    assert server.answered("GradeTrace", "RESOURCE_EXHAUSTED") == 1


def test_too_many_rpcs_without_retries_raises_with_the_hint(make_server: Any) -> None:
    slow = SlowGrader()
    server = make_server(grader=slow, max_concurrent_rpcs=1, retry_after_ms=700)
    with Client(server.target, timeout=5, retry=NO_RETRY) as client:
        client.register_suite(SUITE)
        parked = _hold_one_call(server, slow)
        with pytest.raises(ResourceExhaustedError) as err:
            client.grade(trace("t"), SUITE)
        slow.gate.set()
        parked.join(10)
    assert err.value.reason_code == "TOO_MANY_RPCS"
    assert err.value.metadata["retry_after_ms"] == "700"


class _CancelFirst:
    """A bare gRPC server (no trajgrade handler) answering CANCELLED, the way gRPC itself
    drops a call from its backlog, to the first `n` GradeTrace calls; then the core's answer."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.calls = 0
        self.grader = trajgrade.Grader()

    def grade(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if self.left:
            self.left -= 1
            context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
        (answer,) = self.grader.grade_requests([request])
        assert isinstance(answer, bytes)
        return answer


@pytest.fixture
def cancelling() -> Iterator[tuple[str, _CancelFirst]]:
    behavior = _CancelFirst(2)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handlers = {"GradeTrace": grpc.unary_unary_rpc_method_handler(behavior.grade)}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("trajgrade.v1.GraderService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", behavior
    server.stop(0)


def test_cancelled_before_any_handler_is_retried(cancelling: tuple[str, _CancelFirst]) -> None:
    target, behavior = cancelling
    suite = trajgrade.load_suite(SUITE).SerializeToString()
    with Client(target, timeout=10, retry=FAST_RETRY) as client:
        # An inline suite by bytes: this bare server has no RegisterSuite.
        response = client._call(
            "GradeTrace",
            length_delimited(1, trace_bytes(trace("t"))) + length_delimited(2, suite),
            time.monotonic() + 10,
        )
    assert response.result == expected(trace("t"))[0]
    assert behavior.calls == 3  # two CANCELLED, then answered


def test_cancelled_is_not_retried_without_retries(cancelling: tuple[str, _CancelFirst]) -> None:
    target, behavior = cancelling
    with Client(target, timeout=10, retry=NO_RETRY) as client, pytest.raises(CancelledError):
        client._call("GradeTrace", b"", time.monotonic() + 10)
    assert behavior.calls == 1


def _error(code: grpc.StatusCode, message: str, metadata: dict[str, str]) -> CancelledError:
    error = CancelledError(message)
    error.code, error.message, error.metadata = code, message, metadata
    return error


def test_retry_rule_for_cancelled() -> None:
    gone = _error(grpc.StatusCode.CANCELLED, "CANCELLED", {})
    assert retryable(gone)
    # A handler of ours answered (ErrorInfo): it saw the request; not this rule's case.
    assert not retryable(_error(grpc.StatusCode.CANCELLED, "x", {"field": ""}))
    # This client cancelled the call or closed its channel: retrying would only repeat that.
    assert not retryable(_error(grpc.StatusCode.CANCELLED, "Locally cancelled by app", {}))
    assert not retryable(_error(grpc.StatusCode.CANCELLED, "Channel closed!", {}))
    # A stream that got answers in this attempt: its requests were being handled.
    assert not retryable(gone, answered=True)


def test_backoff_grows_to_its_cap_and_is_jittered() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.5, multiplier=2.0, jitter=0.5)
    rng = random.Random(7)
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        waits = [policy.backoff(attempt, rng) for _ in range(200)]
        # Each wait is the base less at most half of it, and they spread (no lockstep retries).
        assert all(base * 0.5 <= w <= base for w in waits), (attempt, min(waits), max(waits))
        assert max(waits) - min(waits) > base * 0.4, (attempt, waits)
    steady = RetryPolicy(initial_backoff=0.1, jitter=0.0)
    assert {steady.backoff(2, rng) for _ in range(10)} == {0.2}
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


def test_lost_status_is_only_grpc_aio_s_made_up_internal() -> None:
    class Fake(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode, details: str, trailing: Any = ()) -> None:
            self._code, self._details, self._trailing = code, details, trailing

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return self._details

        def trailing_metadata(self) -> Any:
            return self._trailing

    assert lost_status(Fake(grpc.StatusCode.INTERNAL, "Internal error from Core"))
    # Our server's INTERNAL (a bug it reports) carries its status details: never retried.
    ours = (("grpc-status-details-bin", b"..."),)
    assert not lost_status(Fake(grpc.StatusCode.INTERNAL, "Internal error from Core", ours))
    # A drain's status that reached the trailers but lost to the made-up INTERNAL: retried.
    draining = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="shutting down")
    trailers = (("grpc-status-details-bin", draining.SerializeToString()),)
    assert lost_status(Fake(grpc.StatusCode.INTERNAL, "Internal error from Core", trailers))
    bug = status_pb2.Status(code=code_pb2.INTERNAL, message="internal error")
    trailers = (("grpc-status-details-bin", bug.SerializeToString()),)
    assert not lost_status(Fake(grpc.StatusCode.INTERNAL, "Internal error from Core", trailers))
    assert not lost_status(Fake(grpc.StatusCode.INTERNAL, "internal error; the server log"))
    assert not lost_status(Fake(grpc.StatusCode.UNAVAILABLE, "Internal error from Core"))


async def test_async_stream_survives_servers_stopping_mid_stream(make_server: Any) -> None:
    """A stream ended by the server while the client still writes: grpc.aio may report a
    made-up INTERNAL instead of the server's status; the client reopens the stream anyway.
    While the server restarts every reopened stream can fail that way (50 in a row seen in CI,
    ~5 s of back-off at these delays), so the attempts are bounded by the deadline, not a
    count."""
    policy = RetryPolicy(max_attempts=1_000, initial_backoff=0.05, max_backoff=0.2)
    traces = [trace(f"s{i}", amount=5000 if i % 3 else 1) for i in range(300)]
    for _ in range(4):
        server = make_server()

        async def source() -> Any:
            for t in traces:
                yield t
                await asyncio.sleep(0.001)

        outcomes = []
        async with AsyncClient(server.target, retry=policy, timeout=60) as client:
            async for outcome in client.grade_stream(source(), SUITE, chunk_size=1):
                outcomes.append(outcome)
                if len(outcomes) == 100:
                    threading.Thread(target=lambda s=server: (s.stop(), s.start())).start()
        assert outcomes == expected(*traces)
