"""trajgrade.client against real servers over real channels: sync and asyncio, a fleet of two
replicas, retries, deadlines, auth, TLS and the error table."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trajgrade
from server.test_server_ops import Pki  # the throwaway CA of the server tests
from trajgrade.client import (
    NO_RETRY,
    AsyncClient,
    Client,
    DeadlineExceededError,
    ResourceExhaustedError,
    RetryPolicy,
    UnauthenticatedError,
    UnavailableError,
)
from trajgrade.server.wire import count_fields
from trajgrade.v1 import result_pb2

from .conftest import SUITE, ThreadedServer, trace

FAST_RETRY = RetryPolicy(max_attempts=30, initial_backoff=0.05, max_backoff=0.3)


def expected(*traces: dict[str, Any]) -> list[result_pb2.GradeResult]:
    compiled = trajgrade.compile_suite(SUITE)
    return [compiled.grade(t) for t in traces]


# --- the calls -----------------------------------------------------------------------------------


def test_sync_calls_equal_the_library(server: ThreadedServer, tmp_path: Path) -> None:
    traces = [trace("t1"), trace("t2", amount=500), trace("t3")]
    want = expected(*traces)
    with Client(server.target) as client:
        suite_id = client.register_suite(SUITE)
        assert suite_id == trajgrade.compile_suite(SUITE).suite_id
        assert client.get_suite(suite_id) == trajgrade.load_suite(SUITE)
        assert client.grade(traces[0], SUITE) == want[0]
        assert client.grade(traces[1], suite_id) == want[1]
        # A path, a Suite message, YAML text: one suite, one id, one registration.
        path = tmp_path / "suite.json"
        path.write_text(json.dumps(SUITE))
        assert client.grade(traces[2], path) == want[2]
        assert client.grade(traces[2], str(path)) == want[2]
        assert client.grade(traces[2], trajgrade.load_suite(SUITE)) == want[2]
        assert client.grade_batch(traces, SUITE) == want
        assert list(client.grade_stream(iter(traces), SUITE)) == want
    assert server.answered("RegisterSuite") == 1


async def test_async_calls_equal_the_library(server: ThreadedServer) -> None:
    traces = [trace(f"t{i}", amount=5000 if i % 2 else 1) for i in range(50)]
    want = expected(*traces)

    async def produce() -> AsyncIterator[dict[str, Any]]:
        for t in traces:
            yield t

    async with AsyncClient(server.target) as client:
        suite_id = await client.register_suite(SUITE)
        assert (await client.get_suite(suite_id)) == trajgrade.load_suite(SUITE)
        assert await client.grade(traces[0], SUITE) == want[0]
        assert await client.grade_batch(traces, SUITE) == want
        assert [o async for o in client.grade_stream(produce(), SUITE)] == want
        assert [o async for o in client.grade_stream(traces, suite_id)] == want
    assert server.answered("RegisterSuite") == 1


def test_unix_socket(unix_server: ThreadedServer) -> None:
    assert unix_server.target.startswith("unix:")
    with Client(unix_server.target) as client:
        assert client.grade(trace("u"), SUITE) == expected(trace("u"))[0]


def test_item_errors_stay_in_their_slot(make_server: Any) -> None:
    server = make_server(max_calls_per_trace=2)
    too_many = {"id": "big", "calls": [{"name": "x"}] * 3}
    unknown_field = {"id": "typo", "callz": []}
    traces = [trace("a"), too_many, unknown_field, trace("b")]
    with Client(server.target) as client:
        for outcomes in (
            client.grade_batch(traces, SUITE),
            list(client.grade_stream(traces, SUITE, timeout=30)),
        ):
            assert [type(o).__name__ for o in outcomes] == [
                "GradeResult",
                "ItemError",
                "ItemError",
                "GradeResult",
            ]
            assert outcomes[0] == expected(trace("a"))[0]
            assert outcomes[3] == expected(trace("b"))[0]
            big, typo = outcomes[1], outcomes[2]
            assert isinstance(big, result_pb2.ItemError)
            assert (big.trace_id, big.reason_code) == ("big", "TOO_MANY_CALLS")
            assert isinstance(typo, result_pb2.ItemError)
            assert (typo.reason_code, typo.field) == ("INVALID_TRACE", "traces[2].callz")
        with pytest.raises(trajgrade.LimitExceededError) as err:
            client.grade(too_many, SUITE)
        assert err.value.reason_code == "TOO_MANY_CALLS"


class _ChunkLog:
    """The real core, recording the size of each chunk the server grades (grade_stream_chunk)."""

    def __init__(self) -> None:
        self.inner = trajgrade._core.Grader(trajgrade._core.Limits(max_calls_per_trace=2))
        self.chunks: list[int] = []

    def grade_stream_chunk(
        self, suite: Any, message: bytes, cancel: trajgrade._core.CancelToken | None = None
    ) -> bytes:
        self.chunks.append(count_fields(message, 4, ())[0])
        return self.inner.grade_stream_chunk(suite, message, cancel)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize(("chunk_size", "window"), [(1, 1024), (7, 1024), (256, 1024), (64, 10)])
def test_stream_sends_chunks_and_keeps_every_outcome_in_place(
    make_server: Any, chunk_size: int, window: int
) -> None:
    log = _ChunkLog()
    server = make_server(grader=log, max_calls_per_trace=2)
    too_many = {"id": "big", "calls": [{"name": "x"}] * 3}
    traces: list[Any] = [trace(f"t{i}", amount=5000 if i % 3 else 1) for i in range(60)]
    traces[20] = too_many
    traces[41] = {"id": "typo", "callz": []}  # fails to encode here: never sent
    with Client(server.target, stream_window=window) as client:
        outcomes = list(client.grade_stream(iter(traces), SUITE, chunk_size=chunk_size))
    assert len(outcomes) == 60
    for i, outcome in enumerate(outcomes):
        if i == 20:
            assert isinstance(outcome, result_pb2.ItemError)
            assert (outcome.trace_id, outcome.reason_code) == ("big", "TOO_MANY_CALLS")
            if chunk_size > 1:  # renumbered from the chunk's index to the caller's
                assert outcome.field.startswith("traces[20]"), outcome.field
        elif i == 41:
            assert isinstance(outcome, result_pb2.ItemError)
            assert (outcome.reason_code, outcome.field) == ("INVALID_TRACE", "traces[41].callz")
        else:
            assert outcome == expected(traces[i])[0], i
    if chunk_size == 1:
        assert log.chunks == []  # the single-trace form only
    else:
        assert sum(log.chunks) == 59
        assert max(log.chunks) <= min(chunk_size, window)
        assert len(log.chunks) <= 59 // min(chunk_size, window) + 2


async def test_async_stream_sends_chunks(make_server: Any) -> None:
    log = _ChunkLog()
    server = make_server(grader=log, max_calls_per_trace=2)
    traces = [trace(f"t{i}", amount=5000 if i % 2 else 1) for i in range(100)]

    async def produce() -> AsyncIterator[dict[str, Any]]:
        for t in traces:
            yield t

    async with AsyncClient(server.target, stream_chunk=30, stream_window=45) as client:
        assert [o async for o in client.grade_stream(produce(), SUITE)] == expected(*traces)
        assert sum(log.chunks) == 100
        assert max(log.chunks) == 30
        with pytest.raises(ValueError, match="chunk_size"):
            _ = [o async for o in client.grade_stream(traces, SUITE, chunk_size=0)]


def test_errors_are_trajgrade_exceptions(server: ThreadedServer) -> None:
    bad_suite = {
        "assertions": [
            {"tool_called": {}},
            {
                "tool_call_args": {
                    "tool": "x",
                    "match": {"mode": "MATCH_MODE_REGEX", "pattern": "(?=a)"},
                }
            },
        ]
    }
    with Client(server.target) as client:
        for call in (
            lambda: client.register_suite(bad_suite),
            lambda: client.grade(trace("t"), bad_suite),
        ):
            with pytest.raises(trajgrade.InvalidSuiteError) as err:
                call()
            assert err.value.reason_code == "INVALID_SUITE"
            assert err.value.field == "assertions[0].tool_called.tool"
            assert [f for f, _ in err.value.problems] == [
                "assertions[0].tool_called.tool",
                "assertions[1].tool_call_args.match.pattern",
            ]
        unknown = "s1-" + "0" * 32
        with pytest.raises(trajgrade.SuiteNotFoundError) as not_found:
            client.get_suite(unknown)
        assert not_found.value.reason_code == "SUITE_NOT_FOUND"
        assert not_found.value.field == "suite_id"
        with pytest.raises(trajgrade.SuiteNotFoundError):
            client.grade(trace("t"), unknown)
        with pytest.raises(trajgrade.SuiteNotFoundError):
            list(client.grade_stream([trace("t")], unknown))
        with pytest.raises(trajgrade.InvalidRequestError) as bad_trace:
            client.grade(b"\x0a\x02\xff\xfe", SUITE)  # Trace.id that is not UTF-8
        assert bad_trace.value.reason_code


# --- a fleet: the second replica has never seen the suite ----------------------------------------


def _fleet_target(a: ThreadedServer, b: ThreadedServer) -> str:
    return "ipv4:" + ",".join(s.address for s in (a, b))


ROUND_ROBIN = [("grpc.lb_policy_name", "round_robin")]  # what a gRPC-aware balancer does


@pytest.mark.parametrize("rpc", ["GradeTrace", "BatchGradeTraces", "StreamGradeTraces"])
def test_replica_without_the_suite_gets_it_inline(make_server: Any, rpc: str) -> None:
    """Round robin over two replicas; RegisterSuite reaches only one of them."""
    a, b = make_server(), make_server()
    suite_id = trajgrade.compile_suite(SUITE).suite_id
    with Client(_fleet_target(a, b), channel_options=ROUND_ROBIN) as client:
        assert client.register_suite(SUITE) == suite_id
        knows = [s.grader.get_suite(suite_id) is not None for s in (a, b)]
        assert sorted(knows) == [False, True]
        calls = 6
        for n in range(calls):
            t = trace(f"t{n}", amount=5000 if n % 2 else 7)
            if rpc == "GradeTrace":
                assert client.grade(t, SUITE) == expected(t)[0]
            elif rpc == "BatchGradeTraces":
                assert client.grade_batch([t, t], SUITE) == expected(t, t)
            else:
                assert list(client.grade_stream([t, t, t], SUITE)) == expected(t, t, t)
        # Every replica that never saw the suite answered NOT_FOUND to the id at least once;
        # the client re-sent the suite inline and every call got its answer.
        fresh = (a, b)[knows.index(False)]
        assert fresh.answered(rpc, "NOT_FOUND") >= 1
        assert a.answered(rpc) + b.answered(rpc) == calls
        assert a.answered("RegisterSuite") + b.answered("RegisterSuite") == 1
        # The id alone also works wherever the call lands: the client kept the content.
        for n in range(4):
            assert client.grade(trace(f"x{n}"), suite_id) == expected(trace(f"x{n}"))[0]


async def test_replica_without_the_suite_gets_it_inline_async(make_server: Any) -> None:
    a, b = make_server(), make_server()
    async with AsyncClient(_fleet_target(a, b), channel_options=ROUND_ROBIN) as client:
        await client.register_suite(SUITE)
        for n in range(6):
            t = trace(f"t{n}")
            assert await client.grade(t, SUITE) == expected(t)[0]
            assert [o async for o in client.grade_stream([t], SUITE)] == expected(t)
    not_found = sum(
        s.answered(rpc, "NOT_FOUND") for s in (a, b) for rpc in ("GradeTrace", "StreamGradeTraces")
    )
    assert not_found >= 2
    assert sum(s.answered("GradeTrace") for s in (a, b)) == 6
    assert sum(s.answered("StreamGradeTraces") for s in (a, b)) == 6
    assert a.answered("RegisterSuite") + b.answered("RegisterSuite") == 1


def test_explicit_switch_to_a_fresh_replica(make_server: Any) -> None:
    """Same client object, the address behind it replaced (a redeploy): NOT_FOUND, then inline."""
    a = make_server()
    address = a.address
    with Client(address, retry=FAST_RETRY) as client:
        assert client.grade(trace("1"), SUITE) == expected(trace("1"))[0]
        a.stop()
        fresh = make_server(start=False)
        fresh.address = fresh.target = address
        fresh.start()
        assert fresh.grader.get_suite(trajgrade.compile_suite(SUITE).suite_id) is None
        assert client.grade(trace("2"), SUITE) == expected(trace("2"))[0]
        assert client.get_suite(client.register_suite(SUITE)) == trajgrade.load_suite(SUITE)
    assert fresh.answered("GradeTrace", "NOT_FOUND") == 1
    assert fresh.answered("GradeTrace") == 1


# --- retries and deadlines ---------------------------------------------------------------------


def test_retries_until_a_late_server_starts(make_server: Any) -> None:
    late = make_server(start=False)
    timer = threading.Timer(0.6, late.start)
    timer.start()
    try:
        with Client(late.target, retry=FAST_RETRY, timeout=20) as client:
            assert client.grade(trace("late"), SUITE) == expected(trace("late"))[0]
    finally:
        timer.join()


def test_retries_across_a_restart_and_resumes_a_stream(make_server: Any) -> None:
    server = make_server()
    with Client(server.target, retry=FAST_RETRY, timeout=20) as client:
        assert client.grade(trace("before"), SUITE) == expected(trace("before"))[0]
        server.stop()
        with Client(server.target, retry=NO_RETRY) as once, pytest.raises(UnavailableError):
            once.grade(trace("down"), SUITE)
        timer = threading.Timer(0.5, server.start)
        timer.start()
        try:
            assert client.grade(trace("after"), SUITE) == expected(trace("after"))[0]
        finally:
            timer.join()

        # A stream broken mid-way is reopened and the unanswered traces sent again, in order.
        traces = [trace(f"s{i}", amount=5000 if i % 3 else 1) for i in range(30)]
        outcomes = []
        for i, outcome in enumerate(client.grade_stream(traces, SUITE)):
            outcomes.append(outcome)
            if i == 9:
                server.stop()
                threading.Timer(0.3, server.start).start()
        assert outcomes == expected(*traces)


def test_retry_stops_at_the_deadline(make_server: Any) -> None:
    nobody = make_server(start=False)
    policy = RetryPolicy(max_attempts=1000, initial_backoff=0.05, max_backoff=0.1)
    with Client(nobody.target, retry=policy, timeout=0.8) as client:
        started = time.monotonic()
        with pytest.raises(UnavailableError):
            client.grade(trace("t"), SUITE)
        assert 0.3 < time.monotonic() - started < 2.0


class SlowGrader:
    """The real core behind a gate the test opens (no fakes: answers come from the core)."""

    def __init__(self) -> None:
        self.inner = trajgrade.Grader()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def grade_requests(
        self, requests: list[bytes], cancels: list[trajgrade._core.CancelToken | None] | None = None
    ) -> list[Any]:
        self.entered.set()
        self.gate.wait(30)
        return self.inner.grade_requests(requests, cancels)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_deadline(make_server: Any) -> None:
    slow = SlowGrader()
    server = make_server(grader=slow)
    with Client(server.target, timeout=0.5) as client:
        client.register_suite(SUITE)
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError) as err:
            client.grade(trace("t"), SUITE)
        assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 2.0
        slow.gate.set()
        assert client.grade(trace("t"), SUITE, timeout=10) == expected(trace("t"))[0]


def test_full_queue_is_retried(make_server: Any) -> None:
    slow = SlowGrader()
    server = make_server(grader=slow, max_queue_size=1, executor_threads=1, max_batch_size=1)
    suite_id = trajgrade.compile_suite(SUITE).suite_id
    parked: list[threading.Thread] = []
    with Client(server.target, timeout=20) as client:
        client.register_suite(SUITE)
        try:
            full = None
            with Client(server.target, retry=NO_RETRY, timeout=0.5) as impatient:
                # Park calls at the gate until the one queue slot is taken and the server refuses.
                for n in range(8):
                    try:
                        impatient.grade(trace(f"probe{n}"), suite_id)
                    except ResourceExhaustedError as exc:
                        full = exc
                        break
                    except DeadlineExceededError:
                        t = threading.Thread(target=client.grade, args=(trace(f"p{n}"), suite_id))
                        t.start()
                        parked.append(t)
                        time.sleep(0.1)
            assert full is not None, "the queue never filled"
            assert full.reason_code == "QUEUE_FULL"
            assert full.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            threading.Timer(0.3, slow.gate.set).start()
            assert client.grade(trace("3"), suite_id) == expected(trace("3"))[0]
            # The impatient call's refusal plus at least one refused attempt of this call.
            assert server.answered("GradeTrace", "RESOURCE_EXHAUSTED") >= 2
        finally:
            slow.gate.set()
            for t in parked:
                t.join()


# --- security ------------------------------------------------------------------------------------


def test_bearer_token(make_server: Any) -> None:
    server = make_server(auth_token="s3cret")
    with Client(server.target) as anonymous:
        started = time.monotonic()
        with pytest.raises(UnauthenticatedError) as err:
            anonymous.grade(trace("t"), SUITE)
        assert err.value.reason_code == "UNAUTHENTICATED"
        assert time.monotonic() - started < 2.0  # not retried
    with Client(server.target, token="wrong") as wrong, pytest.raises(UnauthenticatedError):
        wrong.register_suite(SUITE)
    with Client(server.target, token="s3cret") as client:
        assert client.grade(trace("t"), SUITE) == expected(trace("t"))[0]
        assert list(client.grade_stream([trace("t")], SUITE)) == expected(trace("t"))


async def test_mutual_tls(make_server: Any, tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    server = make_server(
        tls_cert_file=pki.server_cert, tls_key_file=pki.server_key, tls_client_ca_file=pki.ca
    )
    async with AsyncClient(
        server.target,
        root_certificates=pki.ca,
        certificate_chain=Path(pki.client_cert),
        private_key=Path(pki.client_key).read_bytes(),
    ) as client:
        assert await client.grade(trace("t"), SUITE) == expected(trace("t"))[0]
    async with AsyncClient(server.target, root_certificates=pki.ca, retry=NO_RETRY) as anonymous:
        with pytest.raises(UnavailableError):
            await anonymous.grade(trace("t"), SUITE, timeout=5)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="go together"):
        Client("127.0.0.1:1", certificate_chain=b"x")
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
