"""Test harness: real grpc.aio servers on 127.0.0.1:0 or unix sockets, real channels, real core."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from trajgrade import _core
from trajgrade.server.app import GradingServer
from trajgrade.server.settings import Settings
from trajgrade.server.status import error_info
from trajgrade.server.wire import count_fields
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc, suite_pb2, trace_pb2

CASES_PATH = Path(__file__).resolve().parents[1] / "conformance" / "cases.jsonl"
SERVICE = "/trajgrade.v1.GraderService/"


@dataclass(frozen=True)
class Case:
    """One conformance case as protobuf messages."""

    id: str
    trace: trace_pb2.Trace
    suite: suite_pb2.Suite
    expect: dict[str, Any]

    @property
    def invalid(self) -> bool:
        return "error" in self.expect


def load_cases() -> list[Case]:
    cases = []
    for line in CASES_PATH.read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        try:
            suite = json_format.ParseDict(raw["suite"], suite_pb2.Suite())
            trace = json_format.ParseDict(raw["trace"], trace_pb2.Trace())
        except json_format.ParseError:
            continue  # unknown-field cases cannot be built as messages; the core tests cover them
        cases.append(Case(raw["id"], trace, suite, raw["expect"]))
    return cases


@pytest.fixture(scope="session")
def cases() -> list[Case]:
    return load_cases()


def _graded_in_process(case: Case) -> bool:
    """The library answers this case in-process (not every kind is implemented in the core yet).

    The server tests compare the server with the library, so a case the library cannot grade
    (it raises InternalError, e.g. while CEL is pending) tests nothing about the server.
    """
    grader = _reference()
    if case.invalid:
        try:
            grader.compile_suite(case.suite.SerializeToString())
        except _core.InvalidSuiteError:
            return True
        except _core.TrajgradeError:
            return False
        return False
    request = grader_service_pb2.GradeTraceRequest(trace=case.trace, suite=case.suite)
    try:
        (answer,) = grader.grade_requests([request.SerializeToString()])
    except _core.InternalError:
        return False
    return isinstance(answer, bytes)


_REFERENCE: list[_core.Grader] = []


def _reference() -> _core.Grader:
    if not _REFERENCE:
        _REFERENCE.append(_core.Grader())
    return _REFERENCE[0]


@pytest.fixture(scope="session")
def valid_cases(cases: list[Case]) -> list[Case]:
    chosen = [c for c in cases if not c.invalid and _graded_in_process(c)]
    assert len(chosen) >= 100
    return chosen


@pytest.fixture(scope="session")
def invalid_cases(cases: list[Case]) -> list[Case]:
    chosen = [c for c in cases if c.invalid and _graded_in_process(c)]
    assert len(chosen) >= 20
    return chosen


@pytest.fixture(scope="session")
def reference() -> _core.Grader:
    """The library in-process: what the server must answer, byte for byte."""
    return _reference()


class GatedGrader:
    """The real core behind a gate: grading waits until the test opens it.

    Lets a test hold work in the queue deterministically (queue full, deadlines, drain)
    without any fake: every answer still comes from the real core.
    """

    def __init__(self, inner: _core.Grader) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.batches: list[int] = []
        self.fail_with: BaseException | None = None

    def _wait(self, size: int) -> None:
        self.entered.set()
        self.gate.wait(30)
        self.batches.append(size)
        if self.fail_with is not None:
            raise self.fail_with

    def grade_requests(
        self, requests: list[bytes], cancels: list[_core.CancelToken | None] | None = None
    ) -> list[bytes | BaseException]:
        self._wait(len(requests))
        return self.inner.grade_requests(requests, cancels)

    def grade_batch_request(self, request: bytes, cancel: _core.CancelToken | None = None) -> bytes:
        self._wait(1)
        return self.inner.grade_batch_request(request, cancel)

    def grade_stream_chunk(
        self, suite: Any, message: bytes, cancel: _core.CancelToken | None = None
    ) -> bytes:
        self._wait(count_fields(message, 4, ())[0])
        return self.inner.grade_stream_chunk(suite, message, cancel)

    def register_suite(self, suite: bytes) -> str:
        return self.inner.register_suite(suite)

    def get_suite(self, suite_id: str) -> Any:
        return self.inner.get_suite(suite_id)

    def compile_suite(self, suite: bytes) -> Any:
        return self.inner.compile_suite(suite)


@dataclass
class Harness:
    """A started server plus a channel to it."""

    server: GradingServer
    target: str
    channel: grpc.aio.Channel
    stub: grader_service_pb2_grpc.GraderServiceStub
    extra_channels: list[grpc.aio.Channel] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.ports[0]

    def raw_unary(self, method: str, channel: grpc.aio.Channel | None = None) -> Any:
        """A bytes-in, bytes-out callable for a GraderService method."""
        return (channel or self.channel).unary_unary(SERVICE + method)

    def raw_stream(self, channel: grpc.aio.Channel | None = None) -> Any:
        return (channel or self.channel).stream_stream(SERVICE + "StreamGradeTraces")

    async def grade(self, request: grader_service_pb2.GradeTraceRequest, **kw: Any) -> bytes:
        return bytes(await self.raw_unary("GradeTrace")(request.SerializeToString(), **kw))

    async def grade_raw(self, request: bytes, **kw: Any) -> bytes:
        return bytes(await self.raw_unary("GradeTrace")(request, **kw))


ServerFactory = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    """Start servers with Settings overrides; every one is drained and closed afterwards."""
    started: list[Harness] = []

    async def make(
        *,
        grader: Any = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        **overrides: Any,
    ) -> Harness:
        overrides.setdefault("listen", ("127.0.0.1:0",))
        settings = Settings.from_sources(environ={}, overrides=overrides)
        server = GradingServer(settings, grader=grader)
        ports = await server.start()
        address = settings.listen[0]
        target = address if address.startswith("unix:") else f"127.0.0.1:{ports[0]}"
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=channel_options)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=channel_options)
        harness = Harness(
            server, target, channel, grader_service_pb2_grpc.GraderServiceStub(channel)
        )
        started.append(harness)
        return harness

    yield make
    for harness in started:
        await harness.server.shutdown(grace=0)
        await harness.channel.close()
        for extra in harness.extra_channels:
            await extra.close()


@pytest.fixture
async def server(make_server: ServerFactory) -> Harness:
    return await make_server()


def request_for(case: Case, *, suite_id: str | None = None) -> grader_service_pb2.GradeTraceRequest:
    if suite_id is not None:
        return grader_service_pb2.GradeTraceRequest(trace=case.trace, suite_id=suite_id)
    return grader_service_pb2.GradeTraceRequest(trace=case.trace, suite=case.suite)


def status_of(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, error_details_pb2.ErrorInfo]:
    """The code and the ErrorInfo detail of a failed call (the ErrorInfo must be there)."""
    info = error_info(error.trailing_metadata())
    assert info is not None, f"no ErrorInfo in {error.code()} {error.details()!r}"
    assert info.domain == "trajgrade"
    return error.code(), info


def bad_utf8_trace(trace_id: str = "bad-utf8") -> bytes:
    """A Trace whose final_answer (field 3) is not UTF-8: only the core may find that out."""
    good = trace_pb2.Trace(id=trace_id).SerializeToString()
    return good + b"\x1a\x02\xff\xfe"
